import Foundation
import XCTest

@testable import StoreBackup

extension ObjectLockTests {
    /// Levels on a locked bucket (issue 53): each merged or promoted head is locked for its
    /// level's lifetime from the end of its day, every backup's chain is locked at least as
    /// long as the backup, and retention never deletes a locked point (it is kept, and the
    /// run does not fail). The service's clock is injected; moto's locks are real dates.
    func testLevelsLockEachHeadForItsLevelAndNoChainEndsFirst() async throws {
        try makeBucket("levels", objectLock: true)
        let destination = try s3("levels", days: 1)
        let levels = PointLevelPolicy(minuteSpan: 3_600, hourlySpan: 2 * 86_400, dailySpan: 5 * 86_400)
        let points = try PointService(
            work: work + "/service",
            configure: {
                $0.levels = levels
                $0.verifyAfterCreate = false
            }, destination: { destination })
        let start = points.clock.withLock { $0 }
        let app = try SQLiteConnection(path: points.job.storesDirectory + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        try app.execute("CREATE TABLE commits(id INTEGER PRIMARY KEY)", operation: "writer")
        var merged: [String] = []
        var pruned: [String] = []
        // Hour 10: a full and two points; hour 11 and hour 12: one point each; the next day.
        for (index, minute) in [10, 20, 30, 70, 130, 1_450].enumerated() {
            points.clock.withLock { $0 = start.addingTimeInterval(Double(minute * 60)) }
            try app.execute("INSERT INTO commits VALUES(\(index))", operation: "writer")
            usleep(60_000)  // past the fingerprint's racy window
            let outcome = try await points.service.runScheduled(points.job)
            XCTAssertNil(outcome.error, "minute \(minute): \(outcome.error.map { "\($0)" } ?? "")")
            merged += outcome.merged
            pruned += outcome.pruned
        }
        XCTAssertEqual(merged.count, 2, "hour 10 merged, then the day: \(merged)")

        let listing = try await destination.listBackups()
        let chains = BackupChains(listing)
        let levelOf = PointLevels(chains)
        var untils: [String: Date] = [:]
        for backup in listing { untils[backup.name] = try until(backup.name, bucket: "levels") }
        for backup in listing {
            for base in chains.ancestors(of: backup.name) {
                XCTAssertGreaterThanOrEqual(untils[base]!, untils[backup.name]!, "\(base) is locked for less than \(backup.name)")
            }
        }
        let dayEnd = Date(timeIntervalSince1970: Double(PointLevels.day(of: start) + 1) * 86_400)
        let hourlies = listing.filter { levelOf.level(of: $0.name) == .hourly }.map(\.name)
        XCTAssertGreaterThanOrEqual(hourlies.count, 2, "hour 10's merged point and hour 11's promoted one: \(hourlies)")
        for name in hourlies where BackupName.date(of: name)! < dayEnd {
            XCTAssertGreaterThanOrEqual(untils[name]!, dayEnd.addingTimeInterval(levels.hourlySpan), "\(name): an hourly's lifetime")
        }
        let daily = try XCTUnwrap(merged.last)
        XCTAssertEqual(levelOf.level(of: daily), .daily)
        XCTAssertGreaterThanOrEqual(untils[daily]!, dayEnd.addingTimeInterval(levels.dailySpan), "the daily's lifetime")
        // Minute points past their span are still locked (their upload lock, a day): kept.
        let minutes = listing.filter { levelOf.level(of: $0.name) == .minute && $0.date < dayEnd }.map(\.name)
        XCTAssertFalse(minutes.isEmpty)
        XCTAssertEqual(Set(pruned).intersection(minutes), [], "a locked point is never deleted")
    }
}
