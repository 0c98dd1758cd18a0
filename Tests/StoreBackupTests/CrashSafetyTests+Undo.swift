import Foundation
import XCTest

@testable import StoreBackup

/// Crash safety of undo and of keeping the replaced store, on ``CrashSafetyTests``' store
/// and helpers: kill -9 at every journal phase of an undo leaves, after the next command,
/// exactly the state before the undo (restored store live, replaced one kept with its
/// record) or after it (replaced store live, nothing kept), and the app started again.
extension CrashSafetyTests {
    /// Everything an undo may change: the live store, the kept one, and its record.
    struct UndoState: Equatable {
        var live: [String: StoreFixture.Node]
        var kept: [String: StoreFixture.Node]?
        var record: Data?
    }

    func undoState() throws -> UndoState {
        let layout = StoreLayout(storesDirectory: store)
        return UndoState(
            live: try StoreFixture.describe(store, includeJournals: false),
            kept: FileSystem.fileExists(layout.replaced) ? try StoreFixture.describe(layout.replaced, includeJournals: false) : nil,
            record: FileManager.default.contents(atPath: layout.replacedRecord))
    }

    func testKillAtEachUndoStepLeavesTheStoreBeforeOrAfterTheUndo() throws {
        let layout = StoreLayout(storesDirectory: store)
        let oldTree = try StoreFixture.describe(store, includeJournals: false)
        let restored = try runStoreBackup(["restore", "latest", store, "--from", backups, "--yes"], environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let before = try undoState()
        XCTAssertEqual(before.kept, oldTree)
        XCTAssertNotNil(before.record)
        let after = UndoState(live: oldTree, kept: nil, record: nil)
        // The parent folder as it was before the undo, to start each kill from.
        let pristine = work + "/pristine-undo"
        try FileSystem.createDirectories(pristine)
        for path in [store, layout.replaced, layout.replacedRecord] {
            XCTAssertEqual(try runTool("/bin/cp", ["-a", path, pristine + "/"]).status, 0)
        }
        let started = work + "/app-started"
        // Each journal phase: extracting (before-stop), swapping (before-swap, between-renames),
        // reloading (before-reload), rolling back (during-rollback), starting the app (before-start
        // after a rollback), committing (before-cleanup, before-start after the swap).
        let steps: [(step: String, undone: Bool, failReload: Bool)] = [
            ("before-stop", false, false), ("before-swap", false, false), ("between-renames", false, false),
            ("before-reload", false, false), ("during-rollback", false, true), ("before-start", false, true),
            ("before-cleanup", true, false), ("before-start", true, false),
        ]
        for expectation in steps {
            let label = "undo killed at \(expectation.step)\(expectation.failReload ? " (rejected)" : "")"
            var paused = environment
            paused["STOREBACKUP_TEST_PAUSE_AT"] = expectation.step
            if expectation.failReload { paused["STOREBACKUP_TEST_FAIL_RELOAD"] = "1" }
            let undo = try BackgroundCommand(
                ["undo", store, "--yes", "--stop-command", "true", "--start-command", "touch '\(started)'"], environment: paused)
            XCTAssertTrue(undo.waitForLine(containing: "test pause at \(expectation.step)"), "\(label): never reached; \(undo.stderrSoFar)")
            undo.kill9()
            unlink(started)

            let recovered = try runStoreBackup(["recover", store], environment: environment)
            XCTAssertEqual(recovered.status, 0, "\(label): \(recovered.stderr)")
            XCTAssertTrue(FileSystem.fileExists(started), "\(label): recovery starts the app the undo had stopped; \(recovered.stderr)")
            XCTAssertEqual(
                try undoState(), expectation.undone ? after : before,
                "\(label): the store \(expectation.undone ? "after" : "before") the undo, exactly")
            assertNoTemporaries(allowFailedRestore: false, label)
            // A following command finds a whole store: the undo either is done or can be run.
            let next = try runStoreBackup(["undo", store, "--yes"], environment: environment)
            XCTAssertEqual(next.status == 0, !expectation.undone, "\(label): \(next.stderr)")
            XCTAssertEqual(try undoState(), after, label)

            for path in [store, layout.replaced, layout.replacedRecord] where FileSystem.fileExists(path) {
                try FileSystem.removeTree(path)
            }
            for name in [layout.name, FileSystem.lastComponent(of: layout.replaced), FileSystem.lastComponent(of: layout.replacedRecord)] {
                XCTAssertEqual(try runTool("/bin/cp", ["-a", pristine + "/" + name, layout.parent + "/"]).status, 0)
            }
            XCTAssertEqual(try undoState(), before)
        }
    }

    /// A restore killed while keeping the store it replaced (the earlier kept store already
    /// set aside) is committed by the next command: the restored store live, the store it
    /// replaced kept with its record.
    func testKillWhileKeepingTheReplacedStoreFinishesTheCommit() throws {
        let layout = StoreLayout(storesDirectory: store)
        XCTAssertEqual(try runStoreBackup(["restore", "latest", store, "--from", backups, "--yes"], environment: environment).status, 0)
        // Make the live store differ from the backup again, so the second restore replaces something new.
        try "changed after the first restore\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let replacedTree = try StoreFixture.describe(store, includeJournals: false)
        var paused = environment
        paused["STOREBACKUP_TEST_PAUSE_AT"] = "keeping"
        let restore = try BackgroundCommand(["restore", "latest", store, "--from", backups, "--yes"], environment: paused)
        XCTAssertTrue(restore.waitForLine(containing: "test pause at keeping"), restore.stderrSoFar)
        restore.kill9()
        XCTAssertFalse(FileSystem.fileExists(layout.replaced), "the earlier kept store was set aside before the kill")

        let recovered = try runStoreBackup(["recover", store], environment: environment)
        XCTAssertEqual(recovered.status, 0, recovered.stderr)
        XCTAssertEqual(try StoreFixture.describe(layout.replaced, includeJournals: false), replacedTree)
        let record = try XCTUnwrap(ReplacedStoreRecord.load(from: layout.replacedRecord))
        XCTAssertEqual(record.backupName, try XCTUnwrap(listedBackups().first))
        XCTAssertEqual(try StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv"), "dark")
        assertNoTemporaries(allowFailedRestore: false, "after a kill while keeping")
    }
}
