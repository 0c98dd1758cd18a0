import Foundation
import XCTest

@testable import StoreBackup

/// `--at TIME` as `restore`, `ls` and `verify` read it (``PointInTime``).
final class PointInTimeTests: XCTestCase {
    func testPointInTimeReadsISO8601AndRelativeTimes() throws {
        let now = Date(timeIntervalSince1970: 1_796_464_800)  // 2026-12-05 10:00 UTC
        let utc = TimeZone(identifier: "UTC")!
        XCTAssertEqual(PointInTime.parse("15 minutes ago", now: now), now.addingTimeInterval(-900))
        XCTAssertEqual(PointInTime.parse("2 hours ago", now: now), now.addingTimeInterval(-7200))
        XCTAssertEqual(PointInTime.parse("1 day ago", now: now), now.addingTimeInterval(-86_400))
        XCTAssertEqual(PointInTime.parse("2026-12-05T09:30:00Z", now: now), now.addingTimeInterval(-1800))
        XCTAssertEqual(PointInTime.parse("2026-12-05T10:30:00+01:00", now: now), now.addingTimeInterval(-1800))
        XCTAssertEqual(PointInTime.parse("2026-12-05 09:30", now: now, timeZone: utc), now.addingTimeInterval(-1800))
        XCTAssertEqual(PointInTime.parse("yesterday 14:04", now: now, timeZone: utc), now.addingTimeInterval(-86_400 + 4 * 3600 + 240))
        XCTAssertNil(PointInTime.parse("soon", now: now))
        XCTAssertNil(PointInTime.parse("yesterday 25:00", now: now))
    }

    /// A clock stepped back names a backup after the newest (names never go back): the choice
    /// follows the manifests' times, not the names.
    func testBackupAtChoosesByManifestTimeNotName() async throws {
        let work = try TestEnvironment.temporaryDirectory("at")
        defer { try? FileManager.default.removeItem(atPath: work) }
        try StoreFixture.make(at: work + "/Stores", logRows: 10, blobCount: 1)
        let destination = LocalFolderDestination(folder: work + "/backups")
        try FileManager.default.createDirectory(atPath: work + "/backups", withIntermediateDirectories: true)
        let ten = Date(timeIntervalSince1970: 1_796_464_800)  // 2026-12-05 10:00 UTC
        var helper = StoreHelper(storesDirectory: work + "/Stores", destination: destination)
        helper.now = { ten }
        let first = try await helper.createBackup()
        helper.now = { ten.addingTimeInterval(-60) }
        let stepped = try await helper.createBackup()
        XCTAssertGreaterThan(BackupName.date(of: stepped.name)!, BackupName.date(of: first.name)!, "named after the newest")

        let repository = helper.repository
        let atNineFiftyNine = try await repository.backup(at: ten.addingTimeInterval(-30))
        XCTAssertEqual(atNineFiftyNine.name, stepped.name, "made at 09:59, though named 10:00:01")
        let atTen = try await repository.backup(at: ten.addingTimeInterval(0.5))
        XCTAssertEqual(atTen.name, first.name, "the newest by its manifest, not by its name")
        do {
            _ = try await repository.backup(at: ten.addingTimeInterval(-120))
            XCTFail("nothing was made by 09:58")
        } catch StoreBackupError.backupNotFound {}
    }

    /// `restore --at TIME DIR` (the one argument is the stores directory), `ls --at TIME` and
    /// `extract --at TIME PATH` (every argument a path), and `copy --at TIME`.
    func testCommandLineAtPicksTheBackupOfThatTime() async throws {
        let work = try TestEnvironment.temporaryDirectory("at-cli")
        defer { try? FileManager.default.removeItem(atPath: work) }
        try StoreFixture.make(at: work + "/Stores", logRows: 10, blobCount: 1)
        try FileManager.default.createDirectory(atPath: work + "/backups", withIntermediateDirectories: true)
        let ten = Date(timeIntervalSince1970: 1_796_464_800)  // 2026-12-05 10:00 UTC
        var helper = StoreHelper(storesDirectory: work + "/Stores", destination: LocalFolderDestination(folder: work + "/backups"))
        helper.now = { ten }
        let early = try await helper.createBackup()
        let settings = try SQLiteConnection(path: work + "/Stores/Settings.sqlite", mode: .readWrite)
        try settings.execute("UPDATE kv SET v = 'light'", operation: "test")
        settings.close()
        helper.now = { ten.addingTimeInterval(300) }
        _ = try await helper.createBackup()

        let environment = ["STOREBACKUP_STATE_DIR": work + "/state", "HOME": work]
        let listed = try runTool(
            TestEnvironment.binary, ["ls", "--at", "2026-12-05T10:03:00Z", "--from", work + "/backups", "Settings.sqlite"],
            environment: environment)
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertTrue((listed.stdout + listed.stderr).contains(early.name), listed.stdout + listed.stderr)
        let restored = try runTool(
            TestEnvironment.binary,
            ["restore", "--at", "2026-12-05T10:03:00Z", work + "/Restored", "--from", work + "/backups", "--yes"],
            environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertEqual(try StoreFixture.query(work + "/Restored/Settings.sqlite", "SELECT v FROM kv"), "dark")
        let extracted = try runTool(
            TestEnvironment.binary,
            ["extract", "--at", "2026-12-05T10:03:00Z", "Settings.sqlite", "--into", work + "/Out", "--from", work + "/backups"],
            environment: environment)
        XCTAssertEqual(extracted.status, 0, extracted.stderr)
        XCTAssertEqual(try StoreFixture.query(work + "/Out/Settings.sqlite", "SELECT v FROM kv"), "dark")
        let copied = try runTool(
            TestEnvironment.binary, ["copy", "--at", "2026-12-05T10:03:00Z", "--from", work + "/backups", "--to", work + "/copies"],
            environment: environment)
        XCTAssertEqual(copied.status, 0, copied.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/copies"), [early.name])
        let both = try runTool(
            TestEnvironment.binary,
            ["copy", "latest", "--at", "2026-12-05T10:03:00Z", "--from", work + "/backups", "--to", work + "/copies"],
            environment: environment)
        XCTAssertNotEqual(both.status, 0, "a name and --at")
        let refused = try runTool(
            TestEnvironment.binary, ["restore", "--at", "soon", work + "/Restored", "--from", work + "/backups", "--yes"],
            environment: environment)
        XCTAssertNotEqual(refused.status, 0)
    }
}
