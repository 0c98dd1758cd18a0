import Foundation
import Logging
import XCTest

@testable import StoreBackup

/// Levels of restore points (issue 53) with injected time and the default spans: a simulated
/// week of a writer active every hour (twice in some hours), with its log of acknowledged
/// commits. Each ended hour's points are merged into one, then the day's; retention removes
/// points past their level's span; every backup left restores exactly the commits
/// acknowledged before it; each ended hour within the hourly span and each ended day keeps a
/// point holding its last state; chains stay within the stated bound; compaction downloads
/// nothing.
final class PointLevelTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("levels")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: work)
    }

    struct Commit {
        var id: Int
        var at: Date
    }

    func testAWeekOfPointsKeepsEveryLevelAndRestoresExactly() async throws {
        let backups = work + "/backups"
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        let counting = RestorePointTests.CountingDestination(LocalFolderDestination(folder: backups))
        let levels = PointLevelPolicy()
        let points = try PointService(
            work: work,
            configure: {
                $0.levels = levels
                $0.verifyAfterCreate = false
            }, destination: { counting })
        let store = points.job.storesDirectory
        let start = points.clock.withLock { $0 }.addingTimeInterval(14 * 3_600)  // 2026-12-06 00:00 UTC
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        try app.execute("CREATE TABLE commits(id INTEGER PRIMARY KEY, at REAL NOT NULL)", operation: "writer")
        var log: [Commit] = []
        var lastPointOfHour: [Int: Date] = [:]
        var merged: [String] = []
        var pruned: [String] = []
        let hours = 7 * 24
        for hour in 0..<hours {
            for minute in hour % 5 == 0 ? [10, 35] : [10] {
                let at = start.addingTimeInterval(Double(hour * 3_600 + minute * 60))
                points.clock.withLock { $0 = at }
                let id = log.count + 1
                try app.execute("INSERT INTO commits VALUES(\(id), \(at.timeIntervalSince1970))", operation: "writer")
                log.append(Commit(id: id, at: at))
                if minute == 35 && hour % 7 == 3 {
                    try Data("notes at hour \(hour)\n".utf8).write(to: URL(fileURLWithPath: store + "/notes-\(hour % 2).txt"))
                }
                usleep(60_000)  // past the fingerprint's racy window
                points.clock.withLock { $0 = at.addingTimeInterval(20) }
                let outcome = try await points.service.runScheduled(points.job)
                XCTAssertNil(outcome.error, "hour \(hour) minute \(minute): \(outcome.error.map { "\($0)" } ?? "")")
                merged += outcome.merged
                pruned += outcome.pruned
                if let backup = outcome.backup { lastPointOfHour[hour] = backup.manifest.createdAt }
            }
        }
        let downloads = counting.take().filter { $0.hasPrefix("download") }
        XCTAssertEqual(downloads, [], "compaction works from local copies")
        XCTAssertGreaterThanOrEqual(merged.count, hours / 5 - 1 + 6, "a merge for each ended hour of two points, and each day's")
        XCTAssertFalse(pruned.isEmpty, "minute points past their span were removed")

        let listing = try await LocalFolderDestination(folder: backups).listBackups()
        let chains = BackupChains(listing)
        let levelOf = PointLevels(chains)
        let newest = listing.map(\.date).max()!
        // Nothing older than the minute span (and the hour retention may wait for the next
        // merge) is a minute point unless a kept point needs it.
        for backup in listing where newest.timeIntervalSince(backup.date) >= levels.minuteSpan + 3_600 {
            let level = levelOf.level(of: backup.name)!
            XCTAssertTrue(level > .minute || !chains.dependents(of: backup.name).isEmpty, "\(backup.name) (\(level)) outlived its span")
        }
        let bound = PointLevelPolicy.chainBound(fullEvery: IncrementalPolicy().fullEvery)
        for backup in listing { XCTAssertLessThanOrEqual(chains.chain(of: backup.name).count - 1, bound, backup.name) }

        // Every backup restores exactly the commits acknowledged before it.
        var createdAt: [String: Date] = [:]
        for (index, backup) in listing.enumerated() {
            let target = work + "/restored-\(index)"
            let helper = StoreHelper(storesDirectory: target, destination: LocalFolderDestination(folder: backups))
            _ = try await helper.restore(backup.name)
            let reader = try ArchiveReader(path: backups + "/" + backup.name, backupName: backup.name)
            let made = try XCTUnwrap(reader.manifest?.createdAt)
            // A point 30 minutes or more after its chain's last proof is proven (those at
            // minute 10), a merged point as its newest part was; the others are not.
            let proven = reader.manifest?.databases.allSatisfy { $0.proof != nil } == true
            XCTAssertEqual(proven, Int(made.timeIntervalSince1970) % 3_600 / 60 == 10, "\(backup.name): proofs")
            reader.release()
            createdAt[backup.name] = made
            let ids = try StoreFixture.query(
                target + "/App.sqlite", "SELECT coalesce(group_concat(id), '') FROM (SELECT id FROM commits ORDER BY id)")
            let expected = log.filter { $0.at <= made }.map { String($0.id) }.joined(separator: ",")
            XCTAssertEqual(ids, expected, "\(backup.name)")
            try? FileManager.default.removeItem(atPath: target)
        }
        // Each ended hour within the hourly span, and each ended day, keeps its last state.
        for (hour, last) in lastPointOfHour where hour < hours - 1 && newest.timeIntervalSince(last) < levels.hourlySpan {
            XCTAssertTrue(
                listing.contains { createdAt[$0.name] == last && levelOf.level(of: $0.name)! >= .hourly },
                "hour \(hour): no hourly point holds its last state")
        }
        for day in 0..<6 {
            let endOfDay = lastPointOfHour[day * 24 + 23]!
            XCTAssertTrue(
                listing.contains { createdAt[$0.name] == endOfDay && levelOf.level(of: $0.name) == .daily }, "no daily for day \(day)")
        }
        // At most: the minute span's points, an hourly per hour of the hourly span, a daily per day, and the fulls.
        let objectBound = Int(levels.minuteSpan / 3_600) * 2 + Int(levels.hourlySpan / 3_600) + 7 + 2
        XCTAssertLessThanOrEqual(listing.count, objectBound)
        print("levels: \(listing.count) backups, \(merged.count) merges, \(pruned.count) removed")
    }
}
