import Foundation
import Logging
import XCTest

@_spi(Testing) @testable import StoreBackup

/// The library API a server app embeds: progress as an AsyncSequence, cancellation by
/// cancelling the task at each stage, the create quiesce hook, verify, and the reload
/// hooks' failure paths (the throwing-`reload` rollback itself is
/// `RestoreTests.testReloadFailureRollsBackToTheOldStore`).
final class EmbeddingTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var helper: StoreHelper { StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups)) }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("embed")
        try StoreFixture.make(at: store, logRows: 20_000)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func backupFolderContents() throws -> [String] {
        guard FileManager.default.fileExists(atPath: backups) else { return [] }
        return try FileManager.default.contentsOfDirectory(atPath: backups).sorted()
    }

    private func ourTemporaryFiles() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
            .filter { $0.hasPrefix(".storebackup-\(getpid())-") || $0.hasPrefix(".storebackup-tmp-\(getpid())-") }
    }

    private var liveTheme: String { (try? StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv")) ?? "missing" }

    private func changeTheme(to value: String) throws {
        let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
        defer { settings.close() }
        try settings.execute("UPDATE kv SET v='\(value)' WHERE k='theme'", operation: "change")
    }

    // MARK: progress

    func testOperationStreamsProgressAndEndsWithTheResult() async throws {
        let helper = self.helper
        // A buffer big enough to keep every update, so the test sees the whole sequence.
        let operation = BackupOperation(bufferingNewest: 1_000_000) { try await helper.createBackup(progress: $0) }
        var updates: [BackupProgress] = []
        for await update in operation.progress { updates.append(update) }
        let result = try await operation.value

        XCTAssertEqual(try backupFolderContents(), [result.name])
        let phases = updates.map(\.phase)
        XCTAssertEqual(phases.first, .scanning)
        XCTAssertEqual(phases.last, .done)
        // A local folder publishes by rename: there is no upload phase to report.
        for phase in [BackupProgress.Phase.snapshotting, .archiving] {
            XCTAssertTrue(phases.contains(phase), "reports \(phase)")
        }
        let archiving = updates.filter { $0.phase == .archiving }
        XCTAssertTrue(archiving.contains { $0.currentFile != nil }, "names the file being archived")
        XCTAssertTrue(archiving.allSatisfy { $0.bytesTotal > 0 && $0.bytesDone <= $0.bytesTotal })
        XCTAssertEqual(archiving.last?.fractionCompleted, 1)
        // Remaining phases count down to 0 and never go back up.
        let remaining = updates.compactMap(\.remainingPhases)
        XCTAssertEqual(remaining.count, updates.count, "every update from StoreHelper knows its plan")
        XCTAssertEqual(remaining, remaining.sorted(by: >))
        XCTAssertEqual(remaining.first, 4)
        XCTAssertEqual(remaining.last, 0)
    }

    func testRestoreProgressIncludesTheSwapAndReload() async throws {
        let created = try await helper.createBackup()
        let phases = CallLog()
        _ = try await helper.restore(created.name, progress: { phases.append($0.phase.rawValue) })
        let seen = phases.entries.reduce(into: [String]()) { if $0.last != $1 { $0.append($1) } }
        // A local folder needs no download; databases are checked as they are extracted, and
        // "checking" says restore is waiting for the last check once everything is written.
        XCTAssertEqual(seen, ["extracting", "checking", "swapping", "reloading", "done"])
    }

    // MARK: cancellation

    func testCancellingAnOperationMidwayLeavesNoBackupAndNoTemporaryFiles() async throws {
        let helper = self.helper
        let canceller = TaskCanceller()
        let operation = BackupOperation { progress in
            try await helper.createBackup(progress: { update in
                progress(update)
                if update.phase == .archiving && update.bytesDone > 0 { canceller.cancel() }
            })
        }
        canceller.attach { operation.cancel() }
        var sawArchiving = false
        for await update in operation.progress where update.phase == .archiving { sawArchiving = true }
        do {
            _ = try await operation.value
            XCTFail("create should have been cancelled")
        } catch StoreBackupError.cancelled {}
        XCTAssertTrue(sawArchiving, "it was cancelled midway, while archiving")
        XCTAssertEqual(try backupFolderContents(), [], "no backup and no temporary archive")
        XCTAssertEqual(try ourTemporaryFiles(), [])
        let listed = try await helper.repository.list()
        XCTAssertEqual(listed, [])
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    func testCancellingBeforeTheSnapshotPublishesNothing() async throws {
        let helper = self.helper
        let canceller = TaskCanceller()
        let quiesced = CallLog()
        // The app's quiesce hook runs while the task is cancelled; create must stop there.
        let options = CreateOptions(quiesce: {
            quiesced.append("quiesce"); canceller.cancel()
        })
        let task = Task { try await helper.createBackup(options) }
        canceller.attach { task.cancel() }
        do {
            _ = try await task.value
            XCTFail("create should have been cancelled")
        } catch StoreBackupError.cancelled {}
        XCTAssertEqual(quiesced.entries, ["quiesce"])
        XCTAssertEqual(try backupFolderContents(), [])
        XCTAssertEqual(try ourTemporaryFiles(), [])
    }

    func testRestoreCancelledBeforeTheSwapLeavesTheStoreUntouched() async throws {
        let created = try await helper.createBackup()
        try changeTheme(to: "light")
        let before = try StoreFixture.describe(store)
        let helper = self.helper
        let canceller = TaskCanceller()
        let hookCalls = CallLog()
        let hooks = ReloadHooks(
            willSwap: { hookCalls.append("willSwap") },
            reload: { _ in hookCalls.append("reload") })
        let task = Task {
            try await helper.restore(
                created.name, hooks: hooks,
                progress: { update in
                    if update.phase == .extracting { canceller.cancel() }
                })
        }
        canceller.attach { task.cancel() }
        do {
            _ = try await task.value
            XCTFail("restore should have been cancelled")
        } catch StoreBackupError.cancelled {}
        XCTAssertEqual(hookCalls.entries, [], "the app was never paused")
        XCTAssertEqual(try StoreFixture.describe(store), before)
        let layout = StoreLayout(storesDirectory: store)
        for leftover in [layout.new, layout.old, layout.failed, layout.journal] {
            XCTAssertFalse(FileSystem.fileExists(leftover), leftover)
        }
    }

    // MARK: the app's locks

    /// SQLite's locks are POSIX locks, which a process loses on a file as soon as it closes
    /// any descriptor of that file. A backup made inside the app's process must therefore
    /// never open and close the app's database or its `-shm` on its own: afterwards another
    /// process would see the app's read transaction and its claim on the WAL index gone.
    func testABackupInsideTheAppsProcessLeavesTheAppsLocksInPlace() async throws {
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        try app.execute("BEGIN; SELECT count(*) FROM accounts;", operation: "open a read transaction")
        defer { try? app.execute("COMMIT", operation: "end the read transaction") }
        let files = [store + "/App.sqlite", store + "/App.sqlite-shm"]
        XCTAssertEqual(try lockHolders(files), [getpid(), getpid()], "the app's read transaction should lock both files")
        let created = try await helper.createBackup()
        XCTAssertEqual(try lockHolders(files), [getpid(), getpid()], "a backup dropped the app's locks")
        XCTAssertTrue(FileSystem.fileExists(store + "/App.sqlite-wal"))
        XCTAssertEqual(
            created.manifest.files.map(\.path).filter { $0.hasPrefix("App.sqlite-") }, [],
            "a database's -wal and -shm are not stored: its snapshot is whole without them")
    }

    /// For each file, the process that holds a lock on it as another process sees it (0: none).
    private func lockHolders(_ paths: [String]) throws -> [Int32] {
        let script = """
            import fcntl, os, struct, sys
            for path in sys.argv[1:]:
                fd = os.open(path, os.O_RDWR)
                # struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid
                query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
                kind, _, _, _, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, query))
                print(0 if kind == fcntl.F_UNLCK else pid)
                os.close(fd)
            """
        let result = try runTool("/usr/bin/env", ["python3", "-c", script] + paths)
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout.split(separator: "\n").compactMap { Int32($0) }
    }

    // MARK: hooks

    func testQuiesceRunsBeforeTheSnapshotAndItsWritesAreInTheBackup() async throws {
        let options = CreateOptions(quiesce: { [store] in
            // What an app's cache flush does: write what it held in memory.
            let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
            defer { settings.close() }
            try settings.execute("INSERT INTO kv VALUES('flushed', 'from quiesce')", operation: "flush")
        })
        let created = try await helper.createBackup(options)
        try changeTheme(to: "light")
        _ = try await self.helper.restore(created.name)
        XCTAssertEqual(try StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv WHERE k='flushed'"), "from quiesce")
        XCTAssertEqual(liveTheme, "dark")
    }

    func testAFailingQuiesceHookPublishesNothing() async throws {
        struct FlushFailed: Error {}
        do {
            _ = try await helper.createBackup(CreateOptions(quiesce: { throw FlushFailed() }))
            XCTFail("create should have failed")
        } catch is FlushFailed {}
        XCTAssertEqual(try backupFolderContents(), [])
    }

    func testAFailingWillSwapAbandonsTheRestoreAndReloadsTheLiveStore() async throws {
        struct CannotPause: Error {}
        let created = try await helper.createBackup()
        try changeTheme(to: "light")
        let before = try StoreFixture.describe(store)
        let calls = CallLog()
        let hooks = ReloadHooks(
            willSwap: {
                calls.append("willSwap"); throw CannotPause()
            },
            reload: { [store] directory in
                XCTAssertEqual(directory, store)
                calls.append("reload " + (try StoreFixture.query(directory + "/Settings.sqlite", "SELECT v FROM kv WHERE k='theme'")))
            },
            didRollback: { _ in calls.append("didRollback") })
        do {
            _ = try await helper.restore(created.name, hooks: hooks)
            XCTFail("restore should have been refused")
        } catch StoreBackupError.restoreRefused(let reason) {
            XCTAssertTrue(reason.contains("willSwap"), reason)
        }
        XCTAssertEqual(calls.entries, ["willSwap", "reload light"], "the app resumes on its own, untouched store")
        XCTAssertEqual(try StoreFixture.describe(store), before)
        let layout = StoreLayout(storesDirectory: store)
        for leftover in [layout.new, layout.old, layout.failed, layout.journal] {
            XCTAssertFalse(FileSystem.fileExists(leftover), leftover)
        }
    }

    // MARK: verify and errors

    func testVerifyThroughTheHelper() async throws {
        let created = try await helper.createBackup()
        let results = try await helper.repository.verify()
        XCTAssertEqual(results.map(\.name), [created.name])
        XCTAssertEqual(results.first?.ok, true, results.first?.problem ?? "")
        XCTAssertEqual(results.first?.databases, 2)
    }

    func testVerifyThroughTheHelperOpensEncryptedBackupsWithItsPasswords() async throws {
        var encrypting = helper
        encrypting.passwords = .fixed(try BackupPassword("correct horse battery staple"))
        let created = try await encrypting.createBackup(CreateOptions(encrypt: true))
        let results = try await encrypting.repository.verify()
        XCTAssertEqual(results.map(\.name), [created.name])
        XCTAssertEqual(results.first?.ok, true, results.first?.problem ?? "")
        XCTAssertEqual(results.first?.databases, 2)

        // Without the password the same backup cannot be checked, and says why.
        let withoutPassword = try await helper.repository.verify()
        XCTAssertEqual(withoutPassword.first?.ok, false)
    }

    func testErrorsAreTypedCasesACallerCanSwitchOn() async throws {
        do {
            _ = try await helper.restore("latest")
            XCTFail("there are no backups yet")
        } catch StoreBackupError.noBackups(let destination) {
            XCTAssertEqual(destination, backups)
        }
        let lock = try StoreLock(storesDirectory: store, purpose: "test holds it")
        defer { withExtendedLifetime(lock) {} }
        do {
            _ = try await helper.createBackup()
            XCTFail("the store is locked")
        } catch StoreBackupError.storeLocked(_, let holder) {
            XCTAssertTrue(holder.contains("test holds it"), holder)
        }
    }

    // MARK: logging and test hooks

    /// A restore cut mid-swap (kill -9 of the command line) is repaired by the next call; the
    /// helper tells its injected logger (a notice) and writes nothing to stderr itself.
    func testARecoveryIsLoggedToTheInjectedLoggerAndNothingIsPrinted() async throws {
        _ = try await helper.createBackup()
        let restore = try BackgroundCommand(
            ["restore", "latest", store, "--from", backups, "--yes"],
            environment: ["STOREBACKUP_TEST_PAUSE_AT": "between-renames"])
        XCTAssertTrue(restore.waitForLine(containing: "test pause at between-renames"), restore.stderrSoFar)
        restore.kill9()

        let lines = CallLog()
        let logger = Logger(label: "test") { _ in RecordingLogHandler(lines: lines) }
        let recovering = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups), logger: logger)
        let printed = try capturingStandardError { _ = try recovering.recover() }
        XCTAssertEqual(printed, "", "the library writes nothing to stderr")
        XCTAssertEqual(lines.entries.count, 1, "\(lines.entries)")
        XCTAssertTrue(
            lines.entries.first?.hasPrefix("notice ") == true && lines.entries.first?.contains("rolled back") == true,
            "\(lines.entries)")
        XCTAssertEqual(liveTheme, "dark", "the store as it was before the restore")
    }

    /// The pause points are reached in order through the hook tests set, and only then:
    /// nothing in the library stops or prints on its own.
    func testTheTestHookSeesEachStepOfCreateAndRestore() async throws {
        let steps = CallLog()
        TestHooks.pausePoint = { steps.append($0) }
        defer { TestHooks.pausePoint = nil }
        _ = try await helper.createBackup()
        _ = try await helper.restore("latest")
        XCTAssertEqual(
            steps.entries,
            [
                "create-locked", "snapshots-held", "archive-built", "extracting", "synced", "before-swap", "between-renames",
                "before-reload", "before-cleanup", "keeping",
            ])
    }

    /// Runs `body` with file descriptor 2 sent to a file; returns what was written there.
    private func capturingStandardError(_ body: () throws -> Void) throws -> String {
        let path = work + "/stderr.txt"
        let file = open(path, O_CREAT | O_EXCL | O_WRONLY, 0o600)
        XCTAssertGreaterThanOrEqual(file, 0)
        let saved = dup(STDERR_FILENO)
        dup2(file, STDERR_FILENO)
        defer {
            dup2(saved, STDERR_FILENO)
            close(saved)
            close(file)
        }
        try body()
        return try String(contentsOfFile: path, encoding: .utf8)
    }
}

/// Keeps each log line as "LEVEL message" (metadata left out).
struct RecordingLogHandler: LogHandler {
    let lines: CallLog
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lines.append("\(event.level) \(event.message)")
    }
}
