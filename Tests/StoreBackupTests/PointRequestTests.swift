import Foundation
import Logging
import XCTest

@testable import StoreBackup

/// What a point costs on the wire: the scheduler's points to S3 (rclone) through the fault
/// proxy, which logs every HTTP request and the bytes each carried.
final class PointRequestTests: XCTestCase {
    var servers: TestServers!
    var work = ""

    override func setUpWithError() throws {
        servers = try TestServers(label: "points")
        work = try TestEnvironment.temporaryDirectory("point-requests")
    }

    override func tearDownWithError() throws {
        servers?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    func testAPointOnS3IsACheckOfItsBaseAndItsUpload() async throws {
        let s3 = try servers.start("s3")
        let info = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(s3["port"] as! Int)"])
        let proxy = ContractProxy(port: info["port"] as! Int, logFile: info["log"] as! String)
        let destination = try ContractBackend.s3(s3, work: work).make("points", proxy.port, RetryPolicy())
        let (service, job, clock) = try pointService(to: destination)
        let start: Date = clock.withLock { $0 }
        let app = try SQLiteConnection(path: job.storesDirectory + "/App.sqlite", mode: .readWrite)
        defer { app.close() }

        // The proxy logs a request once it has relayed it, which can be just after the client is
        // done: a request of the test's own (a GET of a backup that is not there) marks the end
        // of each run's requests.
        var seen = 0
        var marks = 0
        func requestsSinceLast() async throws -> [[String: Any]] {
            marks += 1
            let mark = "mark-\(marks)"
            _ = try? await destination.download(mark + " Stores.zip", to: work + "/" + mark, progress: nil)
            func isMark(_ entry: [String: Any]) -> Bool { (entry["request"] as? String)?.contains(mark) == true }
            let all = proxy.entries(until: { $0.dropFirst(seen).contains(where: isMark) })
            let end = try XCTUnwrap(all.indices.dropFirst(seen).first { isMark(all[$0]) }, "the test's own request was logged")
            defer { seen = end + 1 }
            return Array(all[seen..<end])
        }
        var steady: [(requests: [String], down: Int, up: Int)] = []
        for minute in 0..<8 {
            if minute < 5 {
                try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = \(minute + 1)", operation: "writer")
            }
            clock.withLock { $0 = start.addingTimeInterval(Double(minute * 60 + 59)) }
            // A minute passes between runs in life: the last point's checkpoint and the last
            // write are then outside the racy window (50 ms here) of the next run's stat.
            usleep(60_000)
            let outcome = try await service.runScheduled(job)
            XCTAssertNil(outcome.error, "minute \(minute)")
            let requests = try await requestsSinceLast()
            let lines = requests.compactMap { ($0["request"] as? String)?.split(separator: " ").prefix(1).joined() }
            let down = requests.reduce(0) { $0 + (($1["down_bytes"] as? Int) ?? 0) }
            let up = requests.reduce(0) { $0 + (($1["up_bytes"] as? Int) ?? 0) }
            print("minute \(minute): \(outcome.backup?.kind ?? "no point"): \(lines) up \(up) down \(down)")
            if minute >= 1, minute < 5 { steady.append((lines, down, up)) }
            if minute >= 6 {
                XCTAssertNil(outcome.backup, "idle")
                XCTAssertEqual(lines, [], "an idle run asks nothing")
            }
        }
        for point in steady {
            XCTAssertEqual(point.requests, ["HEAD", "PUT"], "a check of the base, then the upload")
            XCTAssertLessThanOrEqual(point.down, 1024, "nothing is downloaded")
        }
    }

    /// Another host deletes the chain's newest backup between two points: the next point is
    /// not published on it (it would not restore), the chain state goes, and the run after
    /// makes a full.
    func testAPointIsNeverPublishedOnABaseDeletedMeanwhile() async throws {
        let destination = try ContractBackend.s3(try servers.start("s3"), work: work).make("gone", nil, RetryPolicy())
        let (service, job, clock) = try pointService(to: destination)
        let app = try SQLiteConnection(path: job.storesDirectory + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        for minute in 0..<2 {
            try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1", operation: "writer")
            clock.withLock { $0 = $0.addingTimeInterval(60) }
            let outcome = try await service.runScheduled(job)
            XCTAssertNil(outcome.error, "minute \(minute)")
        }
        let before = try await destination.sortedBackups()
        XCTAssertEqual(before.count, 2)
        XCTAssertTrue(BackupName.isIncremental(before[0].name))
        try await destination.delete(before[0].name)  // another host's delete

        try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 2", operation: "writer")
        clock.withLock { $0 = $0.addingTimeInterval(60) }
        let refused = try await service.runScheduled(job)
        guard case StoreBackupError.chainBaseChanged(let base, _, _)? = refused.error else {
            return XCTFail("expected chainBaseChanged, got \(String(describing: refused.error))")
        }
        XCTAssertEqual(base, before[0].name)
        let afterRefusal = try await destination.sortedBackups().map(\.name)
        XCTAssertEqual(afterRefusal, [before[1].name], "nothing was published on the deleted base")

        clock.withLock { $0 = $0.addingTimeInterval(60) }
        let next = try await service.runScheduled(job)
        XCTAssertNil(next.error)
        XCTAssertEqual(next.backup?.kind, "full", "the chain starts again")
    }

    /// On a server that honours `If-None-Match` (moto, as S3), a point's name that another
    /// writer took meanwhile is never overwritten: the point takes the next second.
    func testAPointNeverOverwritesANameTakenMeanwhile() async throws {
        let server = try servers.start("moto")
        let destination = try ContractBackend.s3(server, work: work).make("taken", nil, RetryPolicy())
        let (service, job, clock) = try pointService(to: destination)
        let app = try SQLiteConnection(path: job.storesDirectory + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        clock.withLock { $0 = $0.addingTimeInterval(60) }
        let full = try await service.runScheduled(job)
        let fullName = try XCTUnwrap(full.backup?.name)

        try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1", operation: "writer")
        let pointTime = clock.withLock {
            $0 = $0.addingTimeInterval(60); return $0
        }
        let taken = try XCTUnwrap(BackupName.makeIncremental(for: pointTime, base: fullName))
        let foreign = Data("another writer's bytes".utf8)
        try S3RawRequest(server: server).put("taken/" + taken, foreign)

        let point = try await service.runScheduled(job)
        XCTAssertNil(point.error)
        let published = try XCTUnwrap(point.backup?.name)
        XCTAssertNotEqual(published, taken)
        XCTAssertEqual(BackupName.date(of: published), pointTime.addingTimeInterval(1))
        XCTAssertEqual(try S3RawRequest(server: server).get("taken/" + taken), foreign, "the other writer's object is intact")
    }

    /// A point hashes with SHA-256 only the pages whose quick value changed, and runs no
    /// integrity_check (its databases carry no proof; the full's do); once `full-scan-every`
    /// has passed since every page was hashed, the next point hashes them all again.
    func testAPointHashesOnlyChangedPagesAndRunsNoIntegrityCheck() async throws {
        let destination = try DestinationResolver.resolve(work + "/backups")
        let (service, job, clock) = try pointService(to: destination)
        let app = try SQLiteConnection(path: job.storesDirectory + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        let folder = ChainFolder(storesDirectory: job.storesDirectory, destination: destination.displayName)
        func appState() throws -> ChainState.Database {
            try XCTUnwrap(folder.peek()?.databases.first { $0.path == "App.sqlite" })
        }
        func step(minutes: Double) async throws -> BackupResult {
            try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1", operation: "writer")
            let at: Date = clock.withLock {
                $0 = $0.addingTimeInterval(minutes * 60)
                return $0
            }
            usleep(60_000)  // past the racy window, as a minute would be
            let outcome = try await service.runScheduled(job)
            XCTAssertNil(outcome.error)
            let backup = try XCTUnwrap(outcome.backup)
            XCTAssertEqual(backup.manifest.createdAt, at)
            return backup
        }
        let full = try await step(minutes: 1)
        XCTAssertEqual(full.kind, "full")
        XCTAssertNotNil(full.manifest.databases.first { $0.path == "App.sqlite" }?.proof, "a full is checked and proven")
        let fullHashed = try XCTUnwrap(try appState().pagesHashedAt)
        XCTAssertEqual(fullHashed, full.manifest.createdAt)
        XCTAssertNotNil(try appState().quickMap)

        let point = try await step(minutes: 1)
        XCTAssertEqual(point.kind, "incremental")
        XCTAssertNil(point.manifest.databases.first { $0.path == "App.sqlite" }?.proof, "a point runs no integrity_check")
        XCTAssertEqual(try appState().pagesHashedAt, fullHashed, "unchanged pages kept the full's hashes")

        let later = try await step(minutes: 61)
        XCTAssertEqual(later.kind, "incremental")
        XCTAssertEqual(try appState().pagesHashedAt, later.manifest.createdAt, "every page hashed again after full-scan-every")
        let verified = try await BackupRepository(destination: destination).verify(.all)
        XCTAssertEqual(verified.count, 3)
        for result in verified { XCTAssertTrue(result.ok, "\(result.name): \(result.problem ?? "")") }
    }

    /// ``PointService`` to one destination.
    private func pointService(to destination: any BackupDestination) throws -> (BackupService, StoreJob, Locked<Date>) {
        let points = try PointService(work: work) { destination }
        return (points.service, points.job, points.clock)
    }
}
