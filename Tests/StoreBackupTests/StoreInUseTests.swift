import Foundation
import XCTest

@testable import StoreBackup

/// A store that another process has open: restore refuses it, or stops and starts the app
/// around the swap. The app is a real writer process (python3's sqlite3), committing every
/// few milliseconds and writing each acknowledged commit's token to a file.
final class StoreInUseTests: XCTestCase {
    private var work = ""
    private var store = ""
    private var backups = ""
    /// The writer's files: its pid, `ready.<generation>`, `stopped.<pid>`, the acknowledged tokens.
    private var state = ""
    private var writerScript = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("in-use")
        store = work + "/Stores"
        backups = work + "/backups"
        state = work + "/state"
        writerScript = work + "/writer.py"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        try Self.writer.write(toFile: writerScript, atomically: true, encoding: .utf8)
        try StoreFixture.make(at: store, logRows: 200, blobCount: 2)
    }

    override func tearDownWithError() throws {
        if let pid = writerPid() { kill(pid, SIGKILL) }
        try? FileManager.default.removeItem(atPath: work)
    }

    // MARK: refused

    func testWALWriterIsRefusedAndKeepsItsLocks() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        let pid = try XCTUnwrap(writerPid())
        let shm = store + "/App.sqlite-shm"
        XCTAssertTrue(try locksHeld(by: pid, on: shm), "a WAL connection holds a lock on -shm")
        let tree = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)

        let refused = try restore([])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(
            refused.stderr.contains("App.sqlite is open in process \(pid) (")
                && refused.stderr.contains("stop it first, or use --stop-command/--start-command"), refused.stderr)
        // The check read /proc and never opened the database: the writer's locks are still held.
        XCTAssertTrue(try locksHeld(by: pid, on: shm), "the in-use check dropped the writer's locks")
        try assertWriterKeepsCommitting()
        try assertNothingLeftBehind()
        try stopWriter()
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false), tree)
        try assertAcknowledgedCommitsInStore(generations: [0, 1])
    }

    func testIdleRollbackJournalWriterIsRefused() throws {
        try prepareBackup(mode: "delete")
        try startWriter(generation: 1, mode: "delete")
        let pid = try XCTUnwrap(writerPid())
        let refused = try restore([])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("App.sqlite is open in process \(pid) ("), refused.stderr)
        try assertWriterKeepsCommitting()
        try assertNothingLeftBehind()
        try stopWriter()
        try assertAcknowledgedCommitsInStore(generations: [0, 1])
    }

    func testForceRestoresAnywayNamingTheProcesses() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        let pid = try XCTUnwrap(writerPid())
        let forced = try restore(["--force", "--json"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertTrue(forced.stderr.contains("warning: restoring a store in use: App.sqlite is open in process \(pid) ("), forced.stderr)
        let summary = try JSONSerialization.jsonObject(with: Data(forced.stdout.utf8)) as? [String: Any]
        XCTAssertNotNil(summary?["storeInUseWarning"], forced.stdout)
    }

    func testWithoutRootOtherUsersProcessesAreUnseenAndRefusedUnlessForced() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
            throw XCTSkip("needs root (to drop to nobody) and setpriv")
        }
        try prepareBackup(mode: "wal")
        XCTAssertEqual(try runTool("/bin/chown", ["-R", "nobody:", work]).status, 0)
        let asNobody = [
            "--reuid=65534", "--regid=65534", "--clear-groups", TestEnvironment.binary,
            "restore", "latest", store, "--from", backups, "--yes",
        ]
        let refused = try runTool("/usr/bin/setpriv", asNobody)
        XCTAssertEqual(refused.status, 1, refused.stderr)
        // This test process (among others) runs as root: nobody cannot read its descriptors.
        XCTAssertTrue(
            refused.stderr.contains("cannot tell whether \(store) is in use: the open files of ")
                && refused.stderr.contains("processes of other users cannot be read without root: 1 (")
                && refused.stderr.contains("run as root to see every process, or pass --force to restore anyway"), refused.stderr)
        try assertNothingLeftBehind()
        let forced = try runTool("/usr/bin/setpriv", asNobody + ["--force"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertTrue(forced.stderr.contains("warning: restoring although the in-use check could not see every process"), forced.stderr)
    }

    // MARK: stop and start

    func testStopAndStartAroundTheSwapWAL() throws {
        try assertStopAndStartRestores(mode: "wal")
    }

    func testStopAndStartAroundTheSwapRollbackJournal() throws {
        try assertStopAndStartRestores(mode: "delete")
    }

    private func assertStopAndStartRestores(mode: String) throws {
        try prepareBackup(mode: mode)
        try startWriter(generation: 1, mode: mode)
        try waitForAcknowledged(atLeast: 5, generation: 1)
        let result = try restore(appCommands(mode: mode) + ["--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("the app was stopped for "), result.stderr)
        let summary = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], result.stdout)
        let app = try XCTUnwrap(summary["app"] as? [String: Any], result.stdout)
        let downtime = try XCTUnwrap(app["downtimeSeconds"] as? Double)
        let stop = try XCTUnwrap(app["stopSeconds"] as? Double), start = try XCTUnwrap(app["startSeconds"] as? Double)
        XCTAssertGreaterThanOrEqual(downtime, stop + start)

        // The writer runs again; every commit it acknowledges lands in the restored store.
        try waitForAcknowledged(atLeast: 20, generation: 2)
        try stopWriter()
        // Exactly the backup at the swap (no commit of the first writer), then the new commits.
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "SELECT count(*) FROM acks WHERE gen = 1"), "0")
        try assertAcknowledgedCommitsInStore(generations: [0, 2])
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
        try assertNothingLeftBehind()
    }

    func testStoreStillOpenAfterStopIsRefusedAndStartRuns() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        let pid = try XCTUnwrap(writerPid())
        let refused = try restore(["--stop-command", "true", "--start-command", "touch '\(state)/started'"])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(
            refused.stderr.contains("App.sqlite is still open in process \(pid) (")
                && refused.stderr.contains("after the stop command; nothing was swapped"), refused.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: state + "/started"), "the start command ran")
        try assertWriterKeepsCommitting()
        try assertNothingLeftBehind()
        try stopWriter()
        try assertAcknowledgedCommitsInStore(generations: [0, 1])
    }

    func testFailingStopSwapsNothingAndStartRuns() throws {
        try prepareBackup(mode: "wal")
        let tree = try StoreFixture.describe(store, includeJournals: false)
        let refused = try restore(["--stop-command", "exit 3", "--start-command", "touch '\(state)/started'"])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("the stop command failed (it exited with status 3); nothing was swapped"), refused.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: state + "/started"), "the start command ran")
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), tree)
        try assertNothingLeftBehind()
    }

    /// The start command fails after a committed swap: the restored store stays (it is whole
    /// and the app's to open), but the restore exits 1 saying the app must be started, and
    /// nothing is left for recovery to do (the start is not run again).
    func testFailingStartKeepsTheRestoredStoreAndFailsSayingSo() throws {
        try prepareBackup(mode: "wal")
        // A commit after the backup, so the restored store can be told from the live one.
        let live = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try live.execute("INSERT INTO acks VALUES (1, '1-1')", operation: "test change")
        live.close()
        let started = state + "/started"
        let result = try restore(["--stop-command", "true", "--start-command", "touch '\(started)'; exit 4", "--json"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(
            result.stderr.contains("the store was restored, but the start command failed (it exited with status 4); start the app"),
            result.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: started), "the start command ran")
        let summary = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], result.stdout)
        let app = try XCTUnwrap(summary["app"] as? [String: Any], result.stdout)
        XCTAssertEqual(app["startFailure"] as? String, "the start command failed (it exited with status 4)")

        // The live store is the backup's, and a working store.
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "SELECT group_concat(token, ' ') FROM acks"), "0-0")
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
        let writable = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try writable.execute("INSERT INTO acks VALUES (2, '2-1')", operation: "test change")
        writable.close()
        try assertNothingLeftBehind()
        try FileManager.default.removeItem(atPath: started)
        let recovered = try runStoreBackup(["recover", store])
        XCTAssertEqual(recovered.status, 0, recovered.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: started), "no journal asked recovery to start the app again")
    }

    func testStopPastItsTimeoutSwapsNothing() throws {
        try prepareBackup(mode: "wal")
        let refused = try restore([
            "--stop-command", "exec sleep 600", "--stop-timeout", "0.5",
            "--start-command", "touch '\(state)/started'",
        ])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("was killed); nothing was swapped"), refused.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: state + "/started"))
        try assertNothingLeftBehind()
    }

    func testRejectedReloadRollsBackAndStartRuns() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        try waitForAcknowledged(atLeast: 5, generation: 1)
        let rejected = try restore(appCommands(mode: "wal"), environment: ["STOREBACKUP_TEST_FAIL_RELOAD": "1"])
        XCTAssertEqual(rejected.status, 1, rejected.stderr)
        XCTAssertTrue(rejected.stderr.contains("the previous store was put back"), rejected.stderr)
        try waitForAcknowledged(atLeast: 10, generation: 2)
        try stopWriter()
        // The previous store is live again, with the first writer's commits and the second's.
        try assertAcknowledgedCommitsInStore(generations: [0, 1, 2])
        try? FileSystem.removeTree(store + "_FailedRestore")
        try assertNothingLeftBehind()
    }

    func testSIGTERMBetweenStopAndStartStillStartsTheApp() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        var commands = appCommands(mode: "wal")
        // The stop command's parent is the restore: it is told to stop while the app is down.
        commands[1] += "; kill -TERM $PPID"
        let result = try restore(commands)
        XCTAssertTrue([0, 130].contains(result.status), "\(result.status): \(result.stderr)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: state + "/ready.2"), "the start command ran: \(result.stderr)")
        try waitForAcknowledged(atLeast: 5, generation: 2)
        try stopWriter()
        let restored = try StoreFixture.query(store + "/App.sqlite", "SELECT count(*) FROM acks WHERE gen = 1") == "0"
        try assertAcknowledgedCommitsInStore(generations: restored ? [0, 2] : [0, 1, 2])
        try assertNothingLeftBehind()
    }

    func testRestoreKilledWhileTheAppIsStoppedStartsItOnRecovery() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        var commands = appCommands(mode: "wal")
        commands[1] += "; kill -KILL $PPID"
        let killed = try restore(commands)
        XCTAssertEqual(killed.status, 9, killed.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: state + "/ready.2"))
        let recovered = try runStoreBackup(["recover", store])
        XCTAssertEqual(recovered.status, 0, recovered.stderr)
        XCTAssertTrue(recovered.stderr.contains("the interrupted restore had stopped the app; starting it"), recovered.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: state + "/ready.2"), "recovery ran the start command")
        try waitForAcknowledged(atLeast: 5, generation: 2)
        try stopWriter()
        try assertAcknowledgedCommitsInStore(generations: [0, 1, 2])
        try assertNothingLeftBehind()
    }

    func testStopAndStartFromTheConfiguration() throws {
        try prepareBackup(mode: "wal")
        try startWriter(generation: 1, mode: "wal")
        let commands = appCommands(mode: "wal")
        let configuration = work + "/storebackup.yml"
        try """
        stores:
          - name: app
            path: \(store)
            destination: \(backups)
            schedule: daily 02:30
            stop-command: "\(commands[1].replacingOccurrences(of: "\"", with: "\\\""))"
            start-command: "\(commands[3].replacingOccurrences(of: "\"", with: "\\\""))"
            stop-timeout: 30s
        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        let result = try restore(["--config", configuration])
        XCTAssertEqual(result.status, 0, result.stderr)
        try waitForAcknowledged(atLeast: 5, generation: 2)
        try stopWriter()
        try assertAcknowledgedCommitsInStore(generations: [0, 2])
    }

    // MARK: create and the library

    func testCreateReportsWhoHasTheStoreOpen() throws {
        try startWriter(generation: 1, mode: "wal")
        let pid = try XCTUnwrap(writerPid())
        let created = try runStoreBackup(["create", store, "--to", backups, "--json", "--verbose"])
        XCTAssertEqual(created.status, 0, created.stderr)
        XCTAssertTrue(created.stderr.contains("App.sqlite is open in process \(pid) ("), created.stderr)
        let summary = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: Any])
        let openBy = try XCTUnwrap(summary["openBy"] as? [[String: Any]])
        XCTAssertTrue(openBy.contains { $0["file"] as? String == "App.sqlite" && $0["pid"] as? Int == Int(pid) }, "\(openBy)")
    }

    func testLibraryRefusesAStoreOpenInAnotherProcessButNotInItsOwn() async throws {
        try prepareBackup(mode: "wal")
        // This process's own connection is the app's: willSwap closes it, the check skips it.
        let own = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        XCTAssertTrue(StoreUsage.scan(storesDirectory: store).isUnused)
        own.close()
        try startWriter(generation: 1, mode: "wal")
        let pid = try XCTUnwrap(writerPid())
        let usage = StoreUsage.scan(storesDirectory: store)
        XCTAssertTrue(usage.users.contains(StoreUser(file: "App.sqlite", pid: pid, command: usage.users.first?.command ?? "")))
        XCTAssertTrue(usage.blindSpots.isEmpty, "\(usage.blindSpots)")
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let closed = Locked(false)
        do {
            _ = try await helper.restore(
                "latest", options: RestoreOptions(checkStoreInUseEarly: false),
                hooks: ReloadHooks(willSwap: { closed.withLock { $0 = true } }, reload: { _ in }))
            XCTFail("restored a store open in another process")
        } catch let error as StoreBackupError {
            guard case .storeInUse(let reason, .stopStoreUsers) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.hasPrefix("App.sqlite is open in process \(pid) ("), reason)
        }
        XCTAssertTrue(closed.current, "the check runs after willSwap")
        try assertNothingLeftBehind()
    }

    func testConfigurationKeysForStopAndStart() throws {
        let stores = """
            stores:
              - name: app
                path: /srv/app/Stores
                schedule: daily 02:30
            """
        let parsed = try BackupConfiguration.parse(
            yaml: stores + """

                    stop-command: systemctl stop app
                    start-command: systemctl start app
                    stop-timeout: 2m
                """)
        XCTAssertEqual(
            parsed.stores[0].appCommands,
            AppCommands(stop: "systemctl stop app", start: "systemctl start app", timeout: 120))
        XCTAssertNil(try BackupConfiguration.parse(yaml: stores).stores[0].appCommands)
        XCTAssertThrowsError(try BackupConfiguration.parse(yaml: stores + "\n    start-command: systemctl start app")) { error in
            XCTAssertTrue("\(error)".contains("stores[0].stop-command: missing"), "\(error)")
        }
        // Per store only: each app has its own.
        XCTAssertThrowsError(try BackupConfiguration.parse(yaml: "stop-command: x\n" + stores))
    }

    func testLocksAreReadFromProcLocksLines() {
        let lock = FileLocks.parse("3: POSIX  ADVISORY  READ 4242 08:1f:131090 128 128")
        XCTAssertEqual(lock?.pid, 4242)
        XCTAssertEqual(lock?.minor, 0x1f)
        XCTAssertEqual(lock?.inode, 131090)
        XCTAssertNil(FileLocks.parse("3: -> POSIX  ADVISORY  WRITE 4243 08:01:131090 0 EOF"))
        XCTAssertEqual(FileLocks.parse("4: OFDLCK ADVISORY  READ -1 00:05:77 0 EOF")?.pid, -1)
        var info = stat()
        XCTAssertEqual(stat("/proc/self/exe", &info), 0)
        let identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        XCTAssertEqual(identity.major << 8 | identity.minor, UInt64(info.st_dev) & 0xfffff)
    }

    // MARK: the writer

    private static let writer = """
        import os, signal, sqlite3, sys, time
        # Like a daemon: no descriptor of whoever launched it (the test's pipes) is kept open.
        os.closerange(3, 65536)
        db, mode, state, gen = sys.argv[1:5]
        stopping = False
        def on_term(*_):
            global stopping
            stopping = True
        signal.signal(signal.SIGTERM, on_term)
        conn = sqlite3.connect(db, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=" + mode).fetchone()
        conn.execute("CREATE TABLE IF NOT EXISTS acks(gen INTEGER, token TEXT)")
        pid = os.getpid()
        acks = open(os.path.join(state, "acks"), "a", buffering=1)
        with open(os.path.join(state, "pid.tmp"), "w") as f:
            f.write(str(pid))
        os.rename(os.path.join(state, "pid.tmp"), os.path.join(state, "pid"))
        open(os.path.join(state, "ready." + gen), "w").close()
        n = 0
        while not stopping:
            n += 1
            token = "%s-%d" % (gen, n)
            conn.execute("INSERT INTO acks(gen, token) VALUES (?, ?)", (int(gen), token))
            acks.write(token + "\\n")
            time.sleep(0.005)
        conn.close()
        open(os.path.join(state, "stopped.%d" % pid), "w").close()
        """

    /// The backup: the fixture store with an `acks` table (one row of generation 0) in `mode`.
    private func prepareBackup(mode: String) throws {
        try runPythonScript(
            """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1], isolation_level=None)
            c.execute("PRAGMA journal_mode=" + sys.argv[2]).fetchone()
            c.execute("CREATE TABLE acks(gen INTEGER, token TEXT)")
            c.execute("INSERT INTO acks VALUES (0, '0-0')")
            c.close()
            """, [store + "/App.sqlite", mode])
        try? FileManager.default.removeItem(atPath: state + "/acks")
        try Data("0-0\n".utf8).write(to: URL(fileURLWithPath: state + "/acks"))
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
    }

    private func launchCommand(generation: Int, mode: String) -> String {
        "rm -f '\(state)/ready.\(generation)'; python3 '\(writerScript)' '\(store)/App.sqlite' \(mode) '\(state)' \(generation) "
            + "</dev/null >/dev/null 2>&1 & while [ ! -e '\(state)/ready.\(generation)' ]; do sleep 0.01; done"
    }

    private var stopCommand: String {
        "kill -TERM $(cat '\(state)/pid') && while [ ! -e '\(state)/stopped.'$(cat '\(state)/pid') ]; do sleep 0.01; done"
    }

    private func appCommands(mode: String) -> [String] {
        ["--stop-command", stopCommand, "--start-command", launchCommand(generation: 2, mode: mode), "--stop-timeout", "30"]
    }

    /// Starts the writer in the background (not our child: like a service) and waits until it is ready.
    private func startWriter(generation: Int, mode: String) throws {
        let started = try runTool("/bin/sh", ["-c", "timeout 30 sh -c \"$0\"", launchCommand(generation: generation, mode: mode)])
        XCTAssertEqual(started.status, 0, started.stderr)
    }

    private func stopWriter() throws {
        let stopped = try runTool("/bin/sh", ["-c", "timeout 30 sh -c \"$0\"", stopCommand])
        XCTAssertEqual(stopped.status, 0, stopped.stderr)
    }

    private func writerPid() -> Int32? {
        (try? String(contentsOfFile: state + "/pid", encoding: .utf8)).flatMap { Int32($0) }
    }

    private func restore(_ extra: [String], environment: [String: String] = [:]) throws -> CommandResult {
        try runStoreBackup(["restore", "latest", store, "--from", backups, "--yes"] + extra, environment: environment)
    }

    private func acknowledged() -> [String] {
        ((try? String(contentsOfFile: state + "/acks", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Waits (bounded) until the writer's generation has acknowledged `count` commits.
    private func waitForAcknowledged(atLeast count: Int, generation: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let deadline = Date().addingTimeInterval(60)
        while acknowledged().filter({ $0.hasPrefix("\(generation)-") }).count < count {
            guard Date() < deadline else { return XCTFail("the writer did not commit", file: file, line: line) }
            usleep(10_000)
        }
    }

    private func assertWriterKeepsCommitting(file: StaticString = #filePath, line: UInt = #line) throws {
        let before = acknowledged().filter { $0.hasPrefix("1-") }.count
        try waitForAcknowledged(atLeast: before + 10, generation: 1, file: file, line: line)
    }

    /// Every acknowledged commit of these generations is in the store, and nothing else.
    private func assertAcknowledgedCommitsInStore(generations: Set<Int>, file: StaticString = #filePath, line: UInt = #line) throws {
        let expected = Set(acknowledged().filter { generations.contains(Int($0.split(separator: "-")[0])!) })
        let rows = try StoreFixture.query(store + "/App.sqlite", "SELECT group_concat(token, ' ') FROM acks")
        let stored = Set(rows.split(separator: " ").map(String.init))
        XCTAssertTrue(
            expected.isSubset(of: stored), "acknowledged but missing: \(expected.subtracting(stored).sorted().prefix(5))", file: file,
            line: line)
        let others = stored.filter { !generations.contains(Int($0.split(separator: "-")[0])!) }
        XCTAssertTrue(others.isEmpty, "commits of other generations: \(others.sorted().prefix(5))", file: file, line: line)
    }

    /// No `_New`, `_Old`, journal or scratch file beside the store or in it (the store a
    /// restore replaced is kept for undo, as intended).
    private func assertNothingLeftBehind(file: StaticString = #filePath, line: UInt = #line) throws {
        let beside = try FileManager.default.contentsOfDirectory(atPath: work).filter {
            $0.hasPrefix("Stores") && $0 != "Stores" && $0 != "Stores_Replaced" || $0.contains("storebackup-tmp")
                || $0.hasSuffix(".storebackup-restore.json")
        }
        XCTAssertEqual(beside, [], file: file, line: line)
        let inside = try FileManager.default.contentsOfDirectory(atPath: store).filter { $0.contains("storebackup-tmp") }
        XCTAssertEqual(inside, [], file: file, line: line)
    }

    /// Whether `/proc/locks` lists a lock of `pid` on `path` (read without opening the file).
    private func locksHeld(by pid: Int32, on path: String) throws -> Bool {
        let info = try FileSystem.lstatInfo(path)
        let identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        return FileLocks.read().contains {
            $0.pid == pid && FileIdentity(major: $0.major, minor: $0.minor, inode: $0.inode) == identity
        }
    }
}
