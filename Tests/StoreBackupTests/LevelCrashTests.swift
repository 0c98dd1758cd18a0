import Foundation
import XCTest

@testable import StoreBackup

/// Levels (issue 53) when things go wrong mid-merge: `run --once` with levels, its clock set
/// by STOREBACKUP_TEST_NOW, killed -9 after an hour's merged point is built, after it is
/// published (before the chain state names it), and while retention deletes the merged
/// hours' points. After each: everything `list` shows verifies through its chain, no point
/// is lost, and the next run finishes the work.
final class LevelCrashTests: XCTestCase {
    var work = ""
    var app: SQLiteConnection?
    var checks: CrashCheckedStore { CrashCheckedStore(work: work, app: app) }
    var backups: String { work + "/backups" }
    var configuration: String { work + "/storebackup.yml" }
    var target: CrashCheckedStore.Target {
        CrashCheckedStore.Target(to: [], from: ["--from", backups], environment: [:], folder: backups)
    }
    /// 2026-12-05 10:00 UTC: the simulated runs are minutes after it.
    static let start = 1_796_464_800

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("level-crash")
        try FileSystem.createDirectories(checks.scratch)
        try FileSystem.createDirectories(backups)
        try StoreFixture.make(at: checks.store, logRows: 200, blobCount: 2)
        app = try SQLiteConnection(path: checks.store + "/App.sqlite", mode: .readWrite)
        let yaml = """
            state-directory: \(work)/state
            stores:
              - name: app
                path: \(checks.store)
                destination: \(backups)
                schedule: every 1m
                incremental: true
                levels: {minute: 1h, hourly: 7d, daily: 35d}
            """
        try Data(yaml.utf8).write(to: URL(fileURLWithPath: configuration))
    }

    override func tearDownWithError() throws {
        app?.close()
        try? FileSystem.removeTree(work)
    }

    func testKilledMidMergeAndMidRetentionNothingIsLostAndTheNextRunFinishes() throws {
        try checks.write(1)
        try runOnce(minute: 0)
        try checks.write(2)
        try runOnce(minute: 10)
        try checks.write(3)
        try runOnce(minute: 20)
        let atTwenty = try checks.contents(of: checks.store)
        let beforeMerge = try checks.verifiedListing(target, "before the merge")
        XCTAssertEqual(beforeMerge.count, 3)

        // Hour 10 ended: killed once its merged point is built, nothing is published.
        try checks.write(4)
        try killRunOnce(minute: 65, at: "compaction-merged")
        XCTAssertEqual(try checks.verifiedListing(target, "killed after the merge was built"), beforeMerge)

        // Killed once it is published, before the chain state names it: listed, and whole.
        try killRunOnce(minute: 66, at: "compaction-published")
        let published = try checks.verifiedListing(target, "killed after the merged point was published")
        let orphan = published.subtracting(beforeMerge)
        XCTAssertEqual(orphan.count, 1, "the merged point is listed: \(orphan)")
        for name in orphan {
            XCTAssertEqual(try checks.restoredContents(name, target), atTwenty, "the merged point holds hour 10's last state")
        }

        // The next run merges again (the state still names the hour's last point), then backs up.
        let atNext = try checks.contents(of: checks.store)
        try runOnce(minute: 67)
        let finished = try checks.verifiedListing(target, "the run after the kills")
        let added = finished.subtracting(published)
        XCTAssertEqual(added.count, 2, "a merged point and the point of the change: \(added)")
        let levels = try levelsByName()
        let full = try XCTUnwrap(beforeMerge.min())
        let merged = added.filter { BackupName.baseDateText(of: $0) == BackupName.ownDateText(of: full) }
        XCTAssertEqual(merged.count, 1, "merged again onto the full: \(added)")
        for name in merged {
            XCTAssertNotEqual(levels[name], "minute", "hour 10's head is the new merged point: \(levels)")
            XCTAssertEqual(try checks.restoredContents(name, target), atTwenty)
        }
        for name in orphan { XCTAssertEqual(levels[name], "minute", "the first merged point is outranked") }
        let newest = try XCTUnwrap(added.subtracting(merged).first)
        XCTAssertEqual(try checks.restoredContents(newest, target), atNext, "the point after the merge")

        // Two hours later hour 11 is merged and the minute points of hour 10 go: killed after
        // the first deletion, everything left still verifies.
        try checks.write(5)
        try runOnce(minute: 80)
        let beforeRetention = try checks.verifiedListing(target, "before retention")
        try killRunOnce(minute: 185, at: "retention-deleted")
        let midRetention = try checks.verifiedListing(target, "killed while retention deletes")
        XCTAssertLessThan(midRetention.count, beforeRetention.count + 1, "something was deleted before the kill")
        let atEnd = try checks.contents(of: checks.store)
        try runOnce(minute: 186)
        let final = try checks.verifiedListing(target, "the run after retention was killed")
        for name in beforeMerge.subtracting([full]).union(orphan) {
            XCTAssertFalse(final.contains(name), "\(name): a minute point past its span is gone")
        }
        let finalLevels = try levelsByName()
        XCTAssertEqual(finalLevels.values.filter { $0 == "full" }.count, 1)
        let newestName = try XCTUnwrap(final.max { (BackupName.date(of: $0) ?? .distantPast) < (BackupName.date(of: $1) ?? .distantPast) })
        XCTAssertEqual(try checks.restoredContents(newestName, target), atEnd, "the newest backup is the store")
        checks.assertNoLeftovers(target, "after the last run")
        let points = work + "/.Stores.storebackup-chains"
        for folder in (try? FileManager.default.contentsOfDirectory(atPath: points)) ?? [] {
            let copies = (try? FileManager.default.contentsOfDirectory(atPath: points + "/" + folder + "/points")) ?? []
            XCTAssertEqual(copies.filter { $0.hasPrefix(".") }, [], "no temporary left among the local copies")
        }
    }

    // MARK: helpers

    private func environment(minute: Int) -> [String: String] {
        checks.environment(["STOREBACKUP_TEST_NOW": String(Self.start + minute * 60)])
    }

    /// `run --once` at `minute`, which must succeed.
    private func runOnce(minute: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try runStoreBackup(["run", "--config", configuration, "--once"], environment: environment(minute: minute))
        XCTAssertEqual(result.status, 0, "minute \(minute): \(result.stderr)", file: file, line: line)
    }

    /// `run --once` at `minute`, killed -9 where it reaches `step`.
    private func killRunOnce(minute: Int, at step: String, file: StaticString = #filePath, line: UInt = #line) throws {
        var paused = environment(minute: minute)
        paused["STOREBACKUP_TEST_PAUSE_AT"] = step
        let run = try BackgroundCommand(["run", "--config", configuration, "--once"], environment: paused)
        XCTAssertTrue(run.waitForLine(containing: "test pause at \(step)"), "\(step): never reached", file: file, line: line)
        run.kill9()
    }

    /// Each listed backup's level, as `list --json` reads it from the names.
    private func levelsByName() throws -> [String: String] {
        let list = try checks.run(["list", "--json", "--to", backups], target)
        XCTAssertEqual(list.status, 0, list.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]] ?? []
        return Dictionary(
            uniqueKeysWithValues: rows.compactMap { row in (row["name"] as? String).map { ($0, row["level"] as? String ?? "") } })
    }
}
