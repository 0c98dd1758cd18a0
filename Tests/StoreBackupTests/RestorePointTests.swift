import Foundation
import Logging
import XCTest

@testable import StoreBackup

/// Restore to any minute (issue 52): the scheduler's runs a minute apart with injected time,
/// an hour covered in seconds. A writer keeps a log of its acknowledged commits; each point
/// must restore exactly the commits made before it; an idle store makes no point and asks
/// the destination nothing; a point costs at most two requests and its check reads nothing
/// of its chain; `--at` picks points by their manifests' time.
final class RestorePointTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("points")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// A local folder as a remote destination looks to create and verify (no in-place archive,
    /// no local path), counting every request made of it.
    final class CountingDestination: WrappingDestination {
        let base: any BackupDestination
        let requests = Locked<[String]>([])

        init(_ base: any BackupDestination) { self.base = base }

        /// The requests made since the last call.
        func take() -> [String] {
            requests.withLock { taken in
                defer { taken = [] }; return taken
            }
        }
        private func note(_ request: String) { requests.withLock { $0.append(request) } }

        func localPath(of name: String) -> String? { nil }
        func prepareInPlaceArchive() throws -> String? { nil }
        func rangeReader(of name: String, size: Int64) -> BackupRangeReader? { nil }
        func listBackups() async throws -> [BackupListing] {
            note("list")
            return try await base.listBackups()
        }
        func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
            note("upload")
            try await base.upload(file: file, as: name, progress: progress)
        }
        func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
            note("download \(name)")
            try await base.download(name, to: file, progress: progress)
        }
        func delete(_ name: String) async throws {
            note("delete")
            try await base.delete(name)
        }
        func preflight() async throws {
            note("preflight")
            try await base.preflight()
        }
        func retention(of name: String) async throws -> BackupRetention? {
            note("retention")
            return try await base.retention(of: name)
        }
        func staleUploads(olderThan age: Double) async throws -> [StaleUpload] {
            note("stale-uploads")
            return try await base.staleUploads(olderThan: age)
        }
    }

    struct Commit {
        var id: Int
        var at: Date
    }

    /// An hour of `every 1m` with `incremental: true`: 20 active minutes, 20 idle, 20 active.
    func testAnHourOfPointsRestoresEveryAcknowledgedCommit() async throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 2)
        let backups = work + "/backups"
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        let counting = CountingDestination(LocalFolderDestination(folder: backups))
        let start = Date(timeIntervalSince1970: 1_796_464_800)  // 2026-12-05 10:00 UTC
        let clock = Locked(start)
        var job = StoreJob(name: "app", storesDirectory: store, destination: backups, schedule: try Schedule.parse("every 1m"))
        job.incremental = IncrementalPolicy(maxChainLength: 25)
        let service = BackupService(
            jobs: [job], stateStore: BackupStateStore(directory: work + "/state"), destinationOptions: DestinationOptions(),
            logger: Logger(label: "points"), proofKeyFile: work + "/proof.key", now: { clock.withLock { $0 } },
            resolveDestination: { _, _ in counting }, racyWindowNanoseconds: 50_000_000)

        // The app: one connection held open, as a running app holds it.
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        try app.execute("CREATE TABLE commits(id INTEGER PRIMARY KEY, at REAL NOT NULL)", operation: "writer")
        var log: [Commit] = []
        var points: [(name: String, createdAt: Date, kind: String)] = []
        var idlePoints: [Int] = []
        var steadyRequests: [[String]] = []
        for minute in 0..<60 {
            let active = minute < 20 || minute >= 40
            if active {
                for second in [5, 25, 45].prefix(1 + minute % 3) {
                    let at = start.addingTimeInterval(Double(minute * 60 + second))
                    clock.withLock { $0 = at }
                    let id = log.count + 1
                    try app.execute("INSERT INTO commits VALUES(\(id), \(at.timeIntervalSince1970))", operation: "writer")
                    log.append(Commit(id: id, at: at))  // acknowledged: the commit returned
                }
                if minute % 10 == 7 {
                    try Data("notes at minute \(minute)\n".utf8).write(to: URL(fileURLWithPath: store + "/notes.txt"))
                }
                // Past the racy window: the fingerprint may trust these time stamps.
                usleep(60_000)
            }
            clock.withLock { $0 = start.addingTimeInterval(Double(minute * 60 + 59)) }
            _ = counting.take()
            let outcome = try await service.runScheduled(job)
            let requests = counting.take()
            // A minute passes, as far as the racy window can tell: the fingerprint compares the
            // files' real time stamps with the real clock, which the injected clock does not move.
            usleep(60_000)
            XCTAssertNil(outcome.error, "minute \(minute): \(outcome.error.map { "\($0)" } ?? "")")
            guard let backup = outcome.backup else {
                XCTAssertNotNil(outcome.unchangedSince, "minute \(minute)")
                XCTAssertEqual(requests, [], "minute \(minute): an idle run asks the destination nothing")
                continue
            }
            XCTAssertTrue(active || minute == 20, "minute \(minute): a point while idle")
            if !active { idlePoints.append(minute) }
            points.append((backup.name, backup.manifest.createdAt, backup.kind))
            // What the check after a point read: that point alone, never its chain.
            for request in requests where request.hasPrefix("download ") {
                XCTAssertEqual(request, "download \(backup.name)", "minute \(minute)")
            }
            let previousKind = points.dropLast().last?.kind
            if backup.kind == "incremental", previousKind == "incremental" { steadyRequests.append(requests) }
        }
        XCTAssertLessThanOrEqual(idlePoints.count, 1, "idle minutes with a point: \(idlePoints)")
        XCTAssertGreaterThan(steadyRequests.count, 20)
        for requests in steadyRequests {
            XCTAssertLessThanOrEqual(requests.count, 2, "a point's requests: \(requests)")
        }
        print(
            "points: \(points.count) of 60 runs (\(points.filter { $0.kind == "full" }.count) full); steady requests: \(steadyRequests.first ?? [])"
        )

        // Every point restores exactly the commits acknowledged before it.
        for (index, point) in points.enumerated() {
            let target = work + "/restored-\(index)"
            let helper = StoreHelper(storesDirectory: target, destination: LocalFolderDestination(folder: backups))
            _ = try await helper.restore(point.name)
            let ids = try StoreFixture.query(
                target + "/App.sqlite", "SELECT coalesce(group_concat(id), '') FROM (SELECT id FROM commits ORDER BY id)")
            let expected = log.filter { $0.at <= point.createdAt }.map { String($0.id) }.joined(separator: ",")
            XCTAssertEqual(ids, expected, "point \(point.name)")
            try? FileManager.default.removeItem(atPath: target)
        }

        // --at: the newest point made at or before the time, by its manifest.
        let repository = BackupRepository(destination: counting)
        for probe in [points[3].createdAt, points[3].createdAt.addingTimeInterval(30), start.addingTimeInterval(30 * 60)] {
            let expected = points.filter { $0.createdAt <= probe }.max { $0.createdAt < $1.createdAt }!.name
            let found = try await repository.backup(at: probe)
            XCTAssertEqual(found.name, expected, "at \(probe)")
        }
        do {
            _ = try await repository.backup(at: start)
            XCTFail("no point was made by the start")
        } catch StoreBackupError.backupNotFound {}

        // The safety net: two idle hours later the store is read again (full-scan-every), found
        // as the newest point holds it, and no point is published.
        let scanTime = start.addingTimeInterval(3 * 3600)
        clock.withLock { $0 = scanTime }
        let late = try await service.runScheduled(job)
        XCTAssertNil(late.error)
        XCTAssertNil(late.backup, "nothing changed: no point")
        XCTAssertEqual(late.unchangedSince, points.last?.name)
        let state = ChainFolder(storesDirectory: store, destination: LocalFolderDestination(folder: backups).displayName).peek()
        XCTAssertEqual(state?.scannedAt, scanTime, "the store was read, not only its fingerprint compared")
    }
}
