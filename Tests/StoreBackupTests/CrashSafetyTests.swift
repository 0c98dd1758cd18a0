import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance for crash safety: kill -9 at named steps and at seeded random moments of
/// create and restore never lists a partial backup, always leaves a whole store (old or
/// new), and the next command leaves no temporary anywhere (beside the store, in the
/// destination, in TMPDIR). Rejected restores roll back cleanly, back to back.
///
/// The random loops run `STOREBACKUP_CRASH_RUNS` kills each (default 50, at least
/// `minimumRuns`) drawn from `STOREBACKUP_CRASH_SEED` (default fixed), so a failure can be
/// replayed. Each kill records where it landed, and a loop fails unless its long phases
/// (archiving for create; unpacking and checking for restore) were each hit; the short
/// steps have their named pause points above.
final class CrashSafetyTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    /// TMPDIR of every command the tests run, so leftovers there can be seen exactly.
    var scratch: String { work + "/tmp" }
    var environment: [String: String] { ["TMPDIR": scratch] }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("crash")
        try FileSystem.createDirectories(scratch)
        try StoreFixture.make(at: store, logRows: 600, blobCount: 6)
        // A database large enough that unpacking, checking and archiving each take a share
        // of a run that seeded kills find (the loops fail unless they do).
        try runPythonScript(
            """
            import random, sqlite3, sys
            db = sqlite3.connect(sys.argv[1]); db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE bulk(id INTEGER PRIMARY KEY, note TEXT)"); db.execute("CREATE INDEX bulk_note ON bulk(note)")
            r = random.Random(1)
            db.executemany("INSERT INTO bulk(note) VALUES(?)", (("%x" % r.getrandbits(400),) for _ in range(50000)))
            db.commit(); db.close()
            """, [store + "/Bulk.sqlite"])
        let created = try runStoreBackup(["create", store, "--to", backups], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        // Change the live store so "old" and "restored" can be told apart.
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        try execute(store + "/Settings.sqlite", "UPDATE kv SET v='light' WHERE k='theme'")
    }

    override func tearDownWithError() throws {
        try? FileSystem.removeTree(work)
    }

    // MARK: named steps

    /// A kill at each step of restore, while an app reader pins an old snapshot of the live
    /// database, is repaired by the next command into a whole store, without temporaries.
    func testKillAtEachRestoreStepWithAPinnedReaderLeavesAWholeStore() throws {
        let steps: [(step: String, restored: Bool, failReload: Bool)] = [
            ("extracting", false, false), ("synced", false, false), ("before-swap", false, false),
            ("between-renames", false, false), ("before-reload", false, false), ("before-cleanup", true, false),
            ("during-rollback", false, true),
        ]
        let oldTree = try StoreFixture.describe(store, includeJournals: false)
        let pristine = work + "/pristine"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", store, pristine]).status, 0)
        for expectation in steps {
            let reader = try pinnedReader(store + "/App.sqlite")
            var paused = environment
            paused["STOREBACKUP_TEST_PAUSE_AT"] = expectation.step
            if expectation.failReload { paused["STOREBACKUP_TEST_FAIL_RELOAD"] = "1" }
            // --force: the pinned reader is exactly what restore refuses otherwise (see StoreInUseTests).
            let restore = try BackgroundCommand(
                ["restore", "latest", store, "--from", backups, "--yes", "--force"],
                environment: paused)
            XCTAssertTrue(
                restore.waitForLine(containing: "test pause at \(expectation.step)"),
                "\(expectation.step): never reached; stderr: \(restore.stderrSoFar)")
            restore.kill9()
            reader.close()

            let next = try runStoreBackup(["list", "--from", backups], environment: environment)
            XCTAssertEqual(next.status, 0, next.stderr)
            let recovered = try runStoreBackup(["recover", store], environment: environment)
            XCTAssertEqual(recovered.status, 0, recovered.stderr)
            XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok", expectation.step)
            XCTAssertEqual(try liveTheme(), expectation.restored ? "dark" : "light", "after a kill at \(expectation.step)")
            if !expectation.restored {
                XCTAssertEqual(
                    try StoreFixture.describe(store, includeJournals: false), oldTree, "\(expectation.step): the old store, exactly")
            }
            assertNoTemporaries(allowFailedRestore: expectation.failReload, expectation.step)
            try? FileSystem.removeTree(StoreLayout(storesDirectory: store).failed)
            if expectation.restored {
                try FileSystem.removeTree(store)
                XCTAssertEqual(try runTool("/bin/cp", ["-a", pristine, store]).status, 0)
            }
        }
    }

    // MARK: rejected restores

    /// Back-to-back rejected restores (within the same second) each roll back, reload the
    /// old store and call didRollback; only the newest `_FailedRestore` is kept and reported.
    func testBackToBackRejectedRestoresAlwaysRollBackCleanly() async throws {
        let oldTree = try StoreFixture.describe(store, includeJournals: false)
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let calls = CallLog()
        let hooks = ReloadHooks(
            reload: { directory in
                let theme = try StoreFixture.query(directory + "/Settings.sqlite", "SELECT v FROM kv")
                calls.append("reload " + theme)
                if theme == "dark" { throw StoreBackupError.restoreRefused(reason: "app rejected the restored store") }
            },
            didRollback: { _ in calls.append("didRollback") })
        for attempt in 1...3 {
            do {
                _ = try await helper.restore("latest", hooks: hooks)
                XCTFail("attempt \(attempt): the restore should be rejected")
            } catch StoreBackupError.reloadFailed(let reason, let rolledBack) {
                XCTAssertTrue(rolledBack, reason)
                XCTAssertTrue(reason.contains("kept in \(store)_FailedRestore ("), reason)
                XCTAssertEqual(reason.contains("earlier one"), attempt > 1, reason)
            }
            XCTAssertEqual(calls.entries.suffix(3), ["reload dark", "reload light", "didRollback"], "attempt \(attempt)")
            XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), oldTree)
            assertNoTemporaries(allowFailedRestore: true, "attempt \(attempt)")
        }
        XCTAssertEqual(calls.entries.count, 9)

        // The command line says the same, and `recover` names the set-aside store with its size.
        let rejected = try runStoreBackup(
            ["restore", "latest", store, "--from", backups, "--yes"],
            environment: environment.merging(["STOREBACKUP_TEST_FAIL_RELOAD": "1"]) { $1 })
        XCTAssertNotEqual(rejected.status, 0)
        XCTAssertTrue(rejected.stderr.contains("_FailedRestore (") && rejected.stderr.contains("only the newest is kept"), rejected.stderr)
        let recovered = try runStoreBackup(["recover", store], environment: environment)
        XCTAssertTrue(recovered.stderr.contains("set aside: \(store)_FailedRestore ("), recovered.stderr)
        let stateDirectory = work + "/state"
        try BackupStateStore(directory: stateDirectory).save(BackupState(store: "app", storesDirectory: store))
        let status = try runStoreBackup(["status"], environment: environment.merging(["STOREBACKUP_STATE_DIR": stateDirectory]) { $1 })
        XCTAssertTrue(status.stdout.contains("set aside     \(store)_FailedRestore  "), status.stdout + status.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: stateDirectory), ["app.json"])
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), oldTree)
        assertNoTemporaries(allowFailedRestore: true, "command line")
    }

    // MARK: random moments

    /// Kill -9 at seeded random moments of create, the second half with an app reader pinning
    /// an old snapshot (so the snapshot falls back to the backup-API copy).
    func testKillCreateAtRandomMoments() throws {
        var random = SplitMix64(seed: Self.seed)
        var duration = try timedRun(["create", store, "--to", backups])
        var published = try listedBackups()
        let runs = Self.runs
        var reader: PinnedReader?
        defer { reader?.close() }
        var copiesLeftByKills = 0
        var landings: [KillLanding] = []
        for run in 0..<runs {
            if run == runs / 2 {
                reader = try pinnedReader(store + "/App.sqlite")
                // Commits after the reader's snapshot keep the WAL from being checkpointed past it.
                try execute(store + "/App.sqlite", "INSERT INTO log(note) VALUES('after the pinned snapshot')")
                duration = try timedRun(["create", store, "--to", backups])
                XCTAssertEqual(
                    try snapshotMethod(of: try XCTUnwrap(listedBackups().subtracting(published).first)), "backup-api-copy",
                    "the pinned reader must force the fallback copy")
                published = try listedBackups()
            }
            // The moment is a seeded offset from the start of the process (the event the test
            // can see); the kill lands wherever the command is then.
            let moment = random.fraction() * duration * 1.2
            let create = try BackgroundCommand(["create", store, "--to", backups], environment: environment)
            usleep(UInt32(moment * 1_000_000))
            landings.append(land(create))
            let names = (try? FileManager.default.contentsOfDirectory(atPath: backups)) ?? []
            if names.contains(where: { $0.contains("-snapshot-") }) { copiesLeftByKills += 1 }

            // The next commands: `list` on the destination, `recover` on the store.
            let list = try runStoreBackup(["list", "--from", backups], environment: environment)
            XCTAssertEqual(list.status, 0, list.stderr)
            let listed = try listedBackups()
            for name in listed.subtracting(published) {
                let verified = try runStoreBackup(["verify", name, "--from", backups], environment: environment)
                XCTAssertEqual(verified.status, 0, "run \(run): listed backup \(name) is not whole: \(verified.stdout)\(verified.stderr)")
                // Keep the folder small: the check is done.
                unlink(backups + "/" + name)
            }
            published = try listedBackups()
            let recovered = try runStoreBackup(["recover", store], environment: environment)
            XCTAssertEqual(recovered.status, 0, recovered.stderr)
            XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA quick_check"), "ok")
            assertNoTemporaries(allowFailedRestore: false, "create run \(run) killed at \(moment) s")
        }
        print("CrashSafetyTests: \(copiesLeftByKills) create kills left a snapshot copy for the next command to remove")
        assertCoverage(landings, of: ["archiving"], "create")
    }

    /// Kill -9 at seeded random moments of restore: the store is the old one or the restored
    /// one, whole, and which one is what the journal said at the kill (``expectsRestoredStore(after:)``).
    func testKillRestoreAtRandomMoments() throws {
        var random = SplitMix64(seed: Self.seed ^ 0x5eed)
        let oldTree = try StoreFixture.describe(store, includeJournals: false)
        let pristine = work + "/pristine"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", store, pristine]).status, 0)
        // Every database checked (not trusted on its proof), so that the kills can land in the check.
        let restoreArguments = ["restore", "latest", store, "--from", backups, "--yes", "--check-databases"]
        let duration = try timedRun(restoreArguments)
        let newTree = try StoreFixture.describe(store, includeJournals: false)
        XCTAssertNotEqual(newTree, oldTree)
        var outcomes = (old: 0, new: 0)
        var landings: [KillLanding] = []
        for run in 0..<Self.runs {
            try FileSystem.removeTree(store)
            XCTAssertEqual(try runTool("/bin/cp", ["-a", pristine, store]).status, 0)
            let moment = random.fraction() * duration * 1.2
            let restore = try BackgroundCommand(restoreArguments, environment: environment)
            usleep(UInt32(moment * 1_000_000))  // a seeded offset from the process start, as for create
            let landing = land(restore)
            landings.append(landing)

            let recovered = try runStoreBackup(["recover", store], environment: environment)
            XCTAssertEqual(recovered.status, 0, recovered.stderr)
            _ = try runStoreBackup(["list", "--from", backups], environment: environment)
            let tree = try StoreFixture.describe(store, includeJournals: false)
            let restored = Self.expectsRestoredStore(after: landing)
            XCTAssertEqual(
                tree, restored ? newTree : oldTree,
                "restore run \(run) killed at \(moment) s (\(landing)) must leave the \(restored ? "restored" : "old") store")
            if tree == oldTree { outcomes.old += 1 } else if tree == newTree { outcomes.new += 1 }
            assertNoTemporaries(allowFailedRestore: false, "restore run \(run) killed at \(moment) s")
        }
        print("CrashSafetyTests: restore kills left the old store \(outcomes.old) times, the new one \(outcomes.new) times")
        assertCoverage(landings, of: ["extracting", "checking"], "restore")
        // While unpacking and checking, the journal says so and the new store is being built.
        for landing in landings where ["extracting", "checking"].contains(landing.phase) {
            XCTAssertEqual(landing.journalPhase, "extracting", "\(landing)")
            XCTAssertTrue(landing.temporaries.contains(StoreLayout(storesDirectory: store).new), "\(landing)")
        }
    }

    /// verify's scratch folder in TMPDIR, left by a kill, is removed by the next command on a store.
    func testKilledVerifyScratchIsRemovedByTheNextCommand() throws {
        // Verify may finish between seeing its folder and the kill; a few tries make one count.
        var leftBehind: String?
        for _ in 0..<5 where leftBehind == nil {
            let verify = try BackgroundCommand(["verify", "latest", "--from", backups], environment: environment)
            // Wait for the observable event: the scratch folder appearing (or the process ending).
            var seen: String?
            while seen == nil && verify.process.isRunning {
                seen = ((try? FileManager.default.contentsOfDirectory(atPath: scratch)) ?? []).first { ScratchFiles.owner(of: $0) != nil }
                if seen == nil { usleep(500) }
            }
            verify.kill9()
            if let seen, FileSystem.fileExists(scratch + "/" + seen) { leftBehind = seen }
        }
        XCTAssertNotNil(leftBehind, "no kill caught verify with its scratch folder in TMPDIR")
        let recovered = try runStoreBackup(["recover", store], environment: environment)
        XCTAssertEqual(recovered.status, 0, recovered.stderr)
        assertNoTemporaries(allowFailedRestore: false, "after a killed verify")
    }

    // MARK: helpers

    static var runs: Int {
        let asked = Int(ProcessInfo.processInfo.environment["STOREBACKUP_CRASH_RUNS"] ?? "") ?? 50
        // Fewer kills cannot be expected to reach every long phase: a run that asks for them
        // fails, rather than passing without having tested anything.
        XCTAssertGreaterThanOrEqual(asked, minimumRuns, "STOREBACKUP_CRASH_RUNS=\(asked) is below the floor of \(minimumRuns) kills")
        return max(asked, 0)
    }
    static let minimumRuns = 30

    /// Where one kill landed, read while the process was stopped just before it.
    struct KillLanding: CustomStringConvertible {
        /// The last phase the command reported on stderr ("start" before any; "ended" when
        /// it had finished before the kill).
        var phase: String
        /// The restore journal's phase, when there was a journal.
        var journalPhase: String?
        /// Scratch files and restore folders present (beside the store, in the
        /// destination, in TMPDIR).
        var temporaries: [String]
        /// Bytes the process had written.
        var bytesWritten: Int

        var description: String {
            "\(phase) (journal \(journalPhase ?? "none"), \(temporaries.count) temporaries, \(bytesWritten) bytes written)"
        }
    }

    /// Which store recovery must leave after a restore killed at `landing`, as
    /// `RestoreRecovery` decides from the journal: before the commit record (extracting,
    /// swapping, reloading, rolling back) the old store; from it on (committing, starting the
    /// app) the restored one. Without a journal, the restore had either not begun its swap
    /// (old) or had committed (restored: the journal goes once the commit is done, while the
    /// last phase reported may still be swapping or reloading).
    static func expectsRestoredStore(after landing: KillLanding) -> Bool {
        if let journal = landing.journalPhase { return ["committing", "startingApp"].contains(journal) }
        return ["swapping", "reloading", "done", "ended"].contains(landing.phase)
    }

    /// Stops `command`, records where it is, then kills it.
    func land(_ command: BackgroundCommand) -> KillLanding {
        let running = command.freeze()
        command.readAvailableStderr()
        let written = command.bytesWritten ?? 0
        let layout = StoreLayout(storesDirectory: store)
        var temporaries: [String] = []
        for folder in [work, backups, scratch] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            temporaries += names.filter { ScratchFiles.owner(of: $0) != nil }.map { folder + "/" + $0 }
        }
        temporaries += [layout.new, layout.old].filter(FileSystem.fileExists)
        let journal =
            (try? Data(contentsOf: URL(fileURLWithPath: layout.journal)))
            .flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }?["phase"] as? String
        let reported = command.stderrSoFar.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("storebackup: ") else { return nil }
            let word = line.dropFirst("storebackup: ".count).prefix { $0.isLetter }
            return BackupProgress.Phase(rawValue: String(word)).map(\.rawValue)
        }.last
        command.kill9()
        return KillLanding(
            phase: running ? (reported ?? "start") : "ended", journalPhase: journal, temporaries: temporaries, bytesWritten: written)
    }

    /// Fails unless every phase in `required` was hit by at least one kill; prints where
    /// the kills landed.
    func assertCoverage(
        _ landings: [KillLanding], of required: [String], _ operation: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let counts = Dictionary(grouping: landings, by: \.phase).mapValues(\.count)
        print(
            "CrashSafetyTests: \(operation) kills landed in \(counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))"
        )
        for phase in required {
            XCTAssertGreaterThan(counts[phase] ?? 0, 0, "no \(operation) kill landed while \(phase): \(landings)", file: file, line: line)
        }
        // A kill in a phase that writes must find the process had written: the landing is real.
        let writing = landings.filter { required.contains($0.phase) }
        XCTAssertTrue(
            writing.contains { $0.bytesWritten > 0 }, "\(operation): no kill in \(required) found bytes written: \(writing)", file: file,
            line: line)
    }
    static var seed: UInt64 { UInt64(ProcessInfo.processInfo.environment["STOREBACKUP_CRASH_SEED"] ?? "") ?? 20_261_123 }

    private func liveTheme() throws -> String { try StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv") }

    private func execute(_ database: String, _ sql: String) throws {
        let connection = try SQLiteConnection(path: database, mode: .readWrite)
        defer { connection.close() }
        try connection.execute(sql, operation: "test change")
    }

    /// An app connection holding a read transaction (an old snapshot) open.
    private func pinnedReader(_ database: String) throws -> PinnedReader {
        let connection = try SQLiteConnection(path: database, mode: .readWrite)
        try connection.execute("BEGIN", operation: "pin")
        _ = try connection.scalar("SELECT count(*) FROM log", operation: "pin")
        return PinnedReader(connection: connection)
    }

    /// Runs a command to its end once (it must succeed) and returns how long it took, the
    /// span the random moments are drawn from.
    private func timedRun(_ arguments: [String]) throws -> Double {
        let clock = ContinuousClock()
        let started = clock.now
        let result = try runStoreBackup(arguments, environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        return (clock.now - started).inSeconds
    }

    private func snapshotMethod(of backup: String) throws -> String? {
        let manifest = try XCTUnwrap(try ArchiveReader(path: backups + "/" + backup, backupName: backup, passwords: nil).manifest)
        return manifest.databases.first { $0.path == "App.sqlite" }?.snapshotMethod
    }

    func listedBackups() throws -> Set<String> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: backups)) ?? []
        return Set(names.filter(BackupName.isBackup))
    }

    /// No scratch file beside the store, in the destination or in TMPDIR, and no unfinished
    /// restore folder or journal.
    func assertNoTemporaries(allowFailedRestore: Bool, _ context: String, file: StaticString = #filePath, line: UInt = #line) {
        let layout = StoreLayout(storesDirectory: store)
        for folder in [work, backups, scratch] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            let leftovers = names.filter { ScratchFiles.owner(of: $0) != nil || $0.contains("nosync") || $0.contains(".tmp") }
            XCTAssertEqual(leftovers, [], "\(context): temporaries left in \(folder)", file: file, line: line)
        }
        XCTAssertFalse(FileSystem.fileExists(layout.new), "\(context): _New left", file: file, line: line)
        XCTAssertFalse(FileSystem.fileExists(layout.old), "\(context): _Old left", file: file, line: line)
        XCTAssertFalse(FileSystem.fileExists(layout.journal), "\(context): journal left", file: file, line: line)
        if !allowFailedRestore {
            XCTAssertFalse(FileSystem.fileExists(layout.failed), "\(context): _FailedRestore", file: file, line: line)
        }
    }
}

/// An open read transaction; `close` ends it.
final class PinnedReader {
    private var connection: SQLiteConnection?
    init(connection: SQLiteConnection) { self.connection = connection }
    func close() {
        try? connection?.execute("COMMIT", operation: "unpin")
        connection?.close()
        connection = nil
    }
    deinit { close() }
}
