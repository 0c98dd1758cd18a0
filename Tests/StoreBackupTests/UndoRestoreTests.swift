import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance for undo: a restore keeps the store it replaced (renamed beside it, with a
/// record), `undo` gives it back byte for byte in the restore's transaction (hooks, in-use
/// check, rollback), and then there is nothing left to undo. `--no-keep` keeps nothing, only
/// the last replaced store is kept, and it goes once its time is up.
final class UndoRestoreTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var layout: StoreLayout { StoreLayout(storesDirectory: store) }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("undo")
        try StoreFixture.make(at: store, logRows: 400, blobCount: 4)
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        // Change the live store so "old" and "restored" can be told apart.
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
        try settings.execute("UPDATE kv SET v='light' WHERE k='theme'", operation: "change")
        settings.close()
        chmod(store, 0o751)
        StoreFixture.setModificationTime(store, 1_300_000_007)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// Every path with type, mode, mtime and content (databases too), and the folder's own mode and mtime.
    private func tree(_ root: String) throws -> [String: StoreFixture.Node] {
        var nodes = try StoreFixture.describe(root)
        let info = try FileSystem.lstatInfo(root)
        nodes["."] = StoreFixture.Node(type: "dir", mode: UInt32(info.st_mode) & 0o7777, mtime: Int(info.st_mtim.tv_sec), digest: "")
        return nodes
    }

    private var liveTheme: String { (try? StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv")) ?? "missing" }

    private func restore(_ extra: [String] = [], environment: [String: String] = [:]) throws -> CommandResult {
        try runStoreBackup(["restore", "latest", store, "--from", backups, "--yes"] + extra, environment: environment)
    }

    private func json(_ text: String) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], text)
    }

    private func assertNothingKept(_ context: String, file: StaticString = #filePath, line: UInt = #line) {
        for path in [layout.replaced, layout.replacedRecord, layout.old, layout.new, layout.journal, layout.failed] {
            XCTAssertFalse(FileSystem.fileExists(path), "\(context): \(path) left", file: file, line: line)
        }
        let scratch = ((try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []).filter { ScratchFiles.owner(of: $0) != nil }
        XCTAssertEqual(scratch, [], "\(context): temporaries left", file: file, line: line)
    }

    func testUndoGivesBackTheReplacedStoreByteForByte() throws {
        let before = try tree(store)
        let restored = try restore(["--json"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let undoInfo = try XCTUnwrap(try json(restored.stdout)["undo"] as? [String: Any], restored.stdout)
        XCTAssertEqual(undoInfo["command"] as? String, "storebackup undo \(store)")
        XCTAssertEqual(undoInfo["path"] as? String, layout.replaced)
        XCTAssertNotNil(undoInfo["keptUntil"] as? String)
        XCTAssertTrue(restored.stderr.contains("to undo this restore: storebackup undo \(store)"), restored.stderr)
        XCTAssertEqual(liveTheme, "dark")
        XCTAssertEqual(try tree(layout.replaced), before, "kept as it was, renamed")

        // status lists it with its size, the backup that replaced it and its expiry.
        let state = work + "/state"
        try BackupStateStore(directory: state).save(BackupState(store: "app", storesDirectory: store))
        let status = try runStoreBackup(["status"], environment: ["STOREBACKUP_STATE_DIR": state])
        let backup = try onlyBackup(in: backups)
        let name = FileSystem.lastComponent(of: backup)
        XCTAssertTrue(status.stdout.contains("replaced      \(layout.replaced)  "), status.stdout + status.stderr)
        XCTAssertTrue(status.stdout.contains("by the restore of \"\(name)\" on ") && status.stdout.contains(", kept until "), status.stdout)
        let statusJSON = try runStoreBackup(["status", "--json"], environment: ["STOREBACKUP_STATE_DIR": state])
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(statusJSON.stdout.utf8)) as? [[String: Any]])
        let replaced = try XCTUnwrap(rows.first?["replaced"] as? [String: Any], statusJSON.stdout)
        XCTAssertEqual(replaced["replacedBy"] as? String, name)
        XCTAssertEqual(replaced["size"] as? Int, Int(FileSystem.treeSize(layout.replaced)))
        XCTAssertNotNil(replaced["keptUntil"] as? String)

        // The undo runs the app's stop and start commands around its swap.
        let log = work + "/app.log"
        let undone = try runStoreBackup([
            "undo", store, "--yes", "--json", "--stop-command", "echo stop >> '\(log)'", "--start-command", "echo start >> '\(log)'",
        ])
        XCTAssertEqual(undone.status, 0, undone.stderr)
        XCTAssertEqual(try String(contentsOfFile: log, encoding: .utf8), "stop\nstart\n")
        let result = try json(undone.stdout)
        XCTAssertEqual(result["replacedBy"] as? String, name)
        XCTAssertNotNil((result["app"] as? [String: Any])?["downtimeSeconds"] as? Double)
        XCTAssertEqual(try tree(store), before, "the replaced store, byte for byte: every file, mode and mtime")
        XCTAssertEqual(liveTheme, "light")
        assertNothingKept("after the undo")
    }

    func testUndoTwiceIsRefusedClearly() async throws {
        XCTAssertEqual(try restore().status, 0)
        XCTAssertEqual(try runStoreBackup(["undo", store, "--yes"]).status, 0)
        let after = try tree(store)
        let again = try runStoreBackup(["undo", store, "--yes"])
        XCTAssertNotEqual(again.status, 0)
        XCTAssertTrue(again.stderr.contains("nothing to undo: no replaced store is kept beside \(store)"), again.stderr)
        XCTAssertEqual(try tree(store), after, "a refused undo changes nothing")
        // Also through the library, with the same words.
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        XCTAssertNil(helper.replacedStore)
        do {
            _ = try await helper.undoRestore()
            XCTFail("a second undo must be refused")
        } catch StoreBackupError.restoreRefused(let reason) {
            XCTAssertTrue(reason.hasPrefix("nothing to undo"), reason)
        }
    }

    /// Only the store the last restore replaced is kept; `--no-keep` keeps none and drops the earlier one.
    func testOnlyTheLastReplacedStoreIsKeptAndNoKeepKeepsNothing() throws {
        XCTAssertEqual(try restore().status, 0)
        let firstRestored = try tree(store)
        let second = try restore()
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(try tree(layout.replaced), firstRestored, "the earlier kept store was replaced by the one this restore replaced")
        let scratch = try FileManager.default.contentsOfDirectory(atPath: work).filter { ScratchFiles.owner(of: $0) != nil }
        XCTAssertEqual(scratch, [], "the earlier kept store is removed, not parked")

        let dropped = try restore(["--no-keep", "--json"])
        XCTAssertEqual(dropped.status, 0, dropped.stderr)
        XCTAssertTrue(try json(dropped.stdout)["undo"] is NSNull, dropped.stdout)
        XCTAssertFalse(dropped.stderr.contains("storebackup undo"), dropped.stderr)
        assertNothingKept("after --no-keep")
        let undo = try runStoreBackup(["undo", store, "--yes"])
        XCTAssertNotEqual(undo.status, 0)
        XCTAssertTrue(undo.stderr.contains("nothing to undo"), undo.stderr)
        XCTAssertEqual(try restore(["--no-keep", "--keep-replaced", "1d"]).status, 64, "the two cannot be combined")
    }

    /// The kept store goes at the first command once its time is up: the library's clock is
    /// stepped, and the command line's `create` removes one whose record says it expired.
    func testExpiredKeptStoreIsRemovedByTheNextCommand() async throws {
        var helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let start = Date(timeIntervalSince1970: 1_900_000_000)
        helper.now = { start }
        let result = try await helper.restore("latest", options: RestoreOptions(keepReplaced: 3600))
        let kept = try XCTUnwrap(result.replacedStore)
        XCTAssertEqual(kept.keptUntil, start + 3600)
        XCTAssertEqual(kept.replacedAt, start)
        XCTAssertEqual(helper.replacedStore, kept)

        helper.now = { start + 3599 }
        _ = try helper.recover()
        XCTAssertNotNil(helper.replacedStore, "still within its time")
        helper.now = { start + 3600 }
        _ = try helper.recover()
        XCTAssertNil(helper.replacedStore)
        assertNothingKept("after expiry")

        // Any command: `create` runs the same cleanup when it takes the store.
        helper.now = { Date() }
        _ = try await helper.restore("latest")
        var record = try XCTUnwrap(ReplacedStoreRecord.load(from: layout.replacedRecord))
        record.keptUntil = Date(timeIntervalSinceNow: -60)
        try record.save(to: layout.replacedRecord)
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        XCTAssertTrue(created.stderr.contains("it is removed, freeing"), created.stderr)
        assertNothingKept("after create")
    }

    /// The app rejects the kept store: the undo rolls back to exactly the state before it
    /// (restored store live, replaced one kept with its record), and can be tried again.
    func testReloadFailureDuringUndoRollsBack() async throws {
        let old = try tree(store)
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        _ = try await helper.restore("latest")
        let restoredTree = try tree(store)
        let record = try Data(contentsOf: URL(fileURLWithPath: layout.replacedRecord))
        let calls = CallLog()
        let hooks = ReloadHooks(
            reload: { directory in
                let theme = try StoreFixture.query(directory + "/Settings.sqlite", "SELECT v FROM kv")
                calls.append(theme)
                if theme == "light" { throw StoreBackupError.restoreRefused(reason: "app rejected the kept store") }
            },
            didRollback: { _ in calls.append("didRollback") })
        do {
            _ = try await helper.undoRestore(hooks: hooks)
            XCTFail("the undo should be rolled back")
        } catch StoreBackupError.reloadFailed(let reason, let rolledBack) {
            XCTAssertTrue(rolledBack, reason)
            XCTAssertTrue(reason.contains("the undo is rolled back"), reason)
        }
        XCTAssertEqual(calls.entries, ["light", "dark", "didRollback"], "reload on the kept store, then again on the restored one")
        XCTAssertEqual(try tree(store), restoredTree)
        XCTAssertEqual(try tree(layout.replaced), old)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: layout.replacedRecord)), record)
        for path in [layout.old, layout.new, layout.failed, layout.journal] { XCTAssertFalse(FileSystem.fileExists(path), path) }

        // The command line's rejected reload says so and changes nothing either.
        let rejected = try runStoreBackup(["undo", store, "--yes"], environment: ["STOREBACKUP_TEST_FAIL_RELOAD": "1"])
        XCTAssertNotEqual(rejected.status, 0)
        XCTAssertTrue(rejected.stderr.contains("the undo is rolled back"), rejected.stderr)
        XCTAssertEqual(try tree(store), restoredTree)
        XCTAssertEqual(try tree(layout.replaced), old)

        _ = try await helper.undoRestore()
        XCTAssertEqual(try tree(store), old)
        assertNothingKept("after the undo")
    }

    /// Another process holding the live store refuses the undo, as it refuses a restore.
    func testUndoOfAStoreInUseIsRefused() throws {
        XCTAssertEqual(try restore().status, 0)
        // The files only: this test's own connection changes the folder's time.
        let restoredTree = try StoreFixture.describe(store, includeJournals: false)
        let connection = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try connection.execute("BEGIN", operation: "pin")
        _ = try connection.scalar("SELECT count(*) FROM log", operation: "pin")
        let refused = try runStoreBackup(["undo", store, "--yes"])
        try connection.execute("COMMIT", operation: "unpin")
        connection.close()
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("App.sqlite is open in process \(getpid()) ("), refused.stderr)
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), restoredTree)
        XCTAssertTrue(FileSystem.isDirectory(layout.replaced))
    }

    /// The replaced store is kept only when the next restore of a store this size still fits.
    func testKeepingNeedsRoomForTheNextRestore() {
        let gib: Int64 = 1 << 30
        // 100 GiB file system: 5 GiB reserve. 10 GiB free, 2 GiB store: kept.
        XCTAssertNil(KeepSpaceRule.refusal(free: 10 * gib, total: 100 * gib, liveBytes: 2 * gib, earlierBytes: 0))
        // 6 GiB free: 2 GiB store + 5 GiB reserve do not fit.
        let refusal = KeepSpaceRule.refusal(free: 6 * gib, total: 100 * gib, liveBytes: 2 * gib, earlierBytes: 0)
        XCTAssertTrue(refusal?.contains("less than the next restore needs") == true, refusal ?? "kept")
        // The earlier kept store goes at this commit: its space counts as free.
        XCTAssertNil(KeepSpaceRule.refusal(free: 6 * gib, total: 100 * gib, liveBytes: 2 * gib, earlierBytes: 2 * gib))
    }

    func testKeepReplacedIsConfigured() throws {
        let configuration = try BackupConfiguration.parse(
            yaml:
                "schedule: daily 02:30\nkeep-replaced: 2d\nstores:\n  - {name: a, path: /srv/a/Stores}\n  - {name: b, path: /srv/b/Stores, keep-replaced: 0}\n",
            file: "/etc/test.yml", environment: [:])
        XCTAssertEqual(configuration.stores.map(\.keepReplaced), [172_800, 0])
    }
}
