import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance: a backup taken while another process keeps writing restores to a
/// consistent store with everything else in the directory intact.
final class LiveBackupTests: XCTestCase {
    /// The writer commits back to back, so which method create picks depends on timing: the
    /// one-pass read-lock path normally, SQLite's backup API when the writer kept the
    /// checkpoint from finishing (seen on a busy disk). Both must give a consistent store.
    /// `testSnapshotDoesNotBlockWritersAndStaysFrozen` and
    /// `testAReaderHoldingTheWALOpenDoesNotForceTheFallback` pin the read-lock path itself.
    func testBackupWhileAnotherProcessWritesRestoresConsistentStore() throws {
        try backUpWhileWriting(environment: [:], expectedMethods: ["wal-read-lock", "backup-api-copy"])
    }

    /// The fallback path (SQLite's backup API) must be just as consistent.
    func testBackupAPIFallbackIsConsistentToo() throws {
        try backUpWhileWriting(environment: ["STOREBACKUP_SNAPSHOT_METHOD": "backup-api-copy"], expectedMethods: ["backup-api-copy"])
    }

    /// A writer that syncs every commit (synchronous=FULL) keeps committing while create
    /// runs, never failing busy within its busy timeout, and the backup is consistent.
    func testCreateBesideAFullSyncWriter() throws {
        try backUpWhileWriting(
            environment: [:], expectedMethods: ["wal-read-lock", "backup-api-copy"],
            writer: ["synchronous=FULL", "busy_timeout=5000"])
    }

    /// The same beside a rollback-journal writer (journal_mode=DELETE, no WAL): create may
    /// make it wait, but within its busy timeout, and it keeps committing.
    func testCreateBesideARollbackJournalWriter() throws {
        try backUpWhileWriting(
            environment: [:], expectedMethods: ["shared-lock", "backup-api-copy"],
            writer: ["synchronous=FULL", "busy_timeout=5000"], rollbackJournal: true)
    }

    /// While create holds its snapshot of a WAL database (paused right after taking every
    /// snapshot), a `synchronous=FULL` writer in another process goes on committing: the
    /// snapshot is a read transaction, never a lock that writers wait for.
    func testWriterCommitsWhileCreateHoldsTheSnapshot() throws {
        let work = try TestEnvironment.temporaryDirectory("live-held")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 2_000)
        let writer = try startWriter(database: store + "/App.sqlite", settings: ["synchronous=FULL", "busy_timeout=5000"])
        defer { _ = stopWriter(writer) }
        let create = try BackgroundCommand(
            ["create", store, "--to", work + "/backups"],
            environment: ["STOREBACKUP_TEST_PAUSE_AT": "snapshots-held"])
        defer { create.kill9() }
        XCTAssertTrue(create.waitForLine(containing: "test pause at snapshots-held"), "create reached its snapshots")
        let held = try logRows(store + "/App.sqlite")
        // Polled against a deadline, not slept: the writer commits every few milliseconds.
        let deadline = Date().addingTimeInterval(30)
        var now = held
        while now < held + 20 && Date() < deadline { now = try logRows(store + "/App.sqlite") }
        XCTAssertGreaterThanOrEqual(now, held + 20, "the writer stopped committing while create held its snapshot")
    }

    private func backUpWhileWriting(
        environment: [String: String], expectedMethods: Set<String>, writer settings: [String] = [],
        rollbackJournal: Bool = false
    ) throws {
        let work = try TestEnvironment.temporaryDirectory("live")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores", backups = work + "/backups", restored = work + "/Restored"
        try StoreFixture.make(at: store, logRows: 20_000)
        if rollbackJournal {
            try runPythonScript(
                "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode=DELETE')", [store + "/App.sqlite"])
        }
        let before = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)

        let writer = try startWriter(database: store + "/App.sqlite", settings: settings)
        let rowsBefore = try logRows(store + "/App.sqlite")
        let created = try runStoreBackup(["create", store, "--to", backups, "--json"], environment: environment)
        let rowsAfter = try logRows(store + "/App.sqlite")
        let (commits, busy) = stopWriter(writer)
        XCTAssertEqual(created.status, 0, created.stderr)
        XCTAssertGreaterThan(commits, 0)
        XCTAssertGreaterThan(rowsAfter, rowsBefore, "the writer must keep committing while create runs")
        XCTAssertEqual(busy, 0, "the writer (\(settings)) was refused with SQLITE_BUSY within its busy timeout")
        print("LiveBackupTests: writer \(settings): \(rowsAfter - rowsBefore) commits during create, \(commits) in all, \(busy) busy")

        let restoredRun = try runStoreBackup(["restore", "latest", restored, "--from", backups, "--yes"])
        XCTAssertEqual(restoredRun.status, 0, restoredRun.stderr)

        let database = restored + "/App.sqlite"
        XCTAssertEqual(try StoreFixture.query(database, "PRAGMA integrity_check"), "ok")
        XCTAssertEqual(
            Int(try StoreFixture.query(database, "SELECT sum(balance) FROM accounts")),
            StoreFixture.accountCount * StoreFixture.startingBalance)
        let count = Int(try StoreFixture.query(database, "SELECT count(*) FROM log"))!
        let maxID = Int(try StoreFixture.query(database, "SELECT max(id) FROM log"))!
        XCTAssertEqual(count, maxID, "log ids must be gap-free")
        XCTAssertGreaterThanOrEqual(count, rowsBefore)
        XCTAssertEqual(try StoreFixture.query(restored + "/Settings.sqlite", "SELECT v FROM kv WHERE k='theme'"), "dark")

        let after = try StoreFixture.describe(restored, includeJournals: false, includeDatabaseContent: false)
        XCTAssertEqual(after, before, "every file, hidden folder, empty folder, mode and mtime must come back")
        XCTAssertEqual(after["Caches/Empty"]?.type, "dir")
        XCTAssertEqual(after[".secret-config"]?.mode, 0o600)

        let reader = try ArchiveReader(path: try onlyBackup(in: backups), backupName: "test")
        let method = reader.manifest?.databases.first { $0.path == "App.sqlite" }?.snapshotMethod ?? "none"
        XCTAssertTrue(expectedMethods.contains(method), "snapshot method \(method)")
    }

    /// Proof that a snapshot does not block writers: while a snapshot holds its read
    /// transaction, another process commits with no busy timeout at all, and the
    /// snapshot still reads the state from before that commit.
    func testSnapshotDoesNotBlockWritersAndStaysFrozen() throws {
        let work = try TestEnvironment.temporaryDirectory("frozen")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 500)
        let path = store + "/App.sqlite"
        let snapshot = try DatabaseSnapshot(path: path, relativePath: "App.sqlite", scratchDirectory: work)
        XCTAssertEqual(snapshot.method, .walReadLock)

        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
            for i in range(200):
                db.execute("BEGIN IMMEDIATE"); db.execute("INSERT INTO log(note) VALUES ('during snapshot')"); db.execute("COMMIT")
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            print(db.execute("SELECT count(*) FROM log").fetchone()[0])
            """
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        writer.arguments = ["python3", "-c", script, path]
        let output = Pipe()
        writer.standardOutput = output
        try writer.run()
        writer.waitUntilExit()
        XCTAssertEqual(writer.terminationStatus, 0, "a writer with busy timeout 0 must not be blocked by the snapshot")
        XCTAssertEqual(
            String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .trimmingCharacters(in: .whitespacesAndNewlines), "700")

        // Copy the snapshot bytes out and check they hold the old state.
        let copy = work + "/copy.sqlite"
        try copyOut(snapshot, to: copy)
        XCTAssertEqual(try StoreFixture.query(copy, "SELECT count(*) FROM log"), "500")
        XCTAssertEqual(try StoreFixture.query(copy, "PRAGMA integrity_check"), "ok")
    }

    /// Another connection holding a read transaction keeps the WAL from being emptied
    /// (a TRUNCATE checkpoint must wait for it). The snapshot still takes the one-pass
    /// path: the WAL is checkpointed into the main file under the write lock, and the read
    /// starts on it. Its bytes hold every commit made before it, the WAL's included.
    func testAReaderHoldingTheWALOpenDoesNotForceTheFallback() throws {
        let work = try TestEnvironment.temporaryDirectory("reader")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 500)
        let path = store + "/App.sqlite"
        let writer = try SQLiteConnection(path: path, mode: .readWrite)
        try writer.execute("PRAGMA wal_autocheckpoint=0", operation: "no automatic checkpoints")
        for _ in 0..<50 { try writer.execute("INSERT INTO log(note) VALUES ('in the WAL')", operation: "insert") }
        let reader = try SQLiteConnection(path: path, mode: .readOnly)
        try reader.execute("BEGIN", operation: "begin")
        XCTAssertEqual(try reader.scalar("SELECT count(*) FROM log", operation: "count"), "550")
        var info = stat()
        XCTAssertEqual(stat(path + "-wal", &info), 0)
        XCTAssertGreaterThan(info.st_size, 0, "the commits are in the WAL")

        let snapshot = try DatabaseSnapshot(path: path, relativePath: "App.sqlite", scratchDirectory: work)
        XCTAssertEqual(snapshot.method, .walReadLock)
        try writer.execute("INSERT INTO log(note) VALUES ('after the snapshot')", operation: "insert")
        let copy = work + "/copy.sqlite"
        try copyOut(snapshot, to: copy)
        try reader.execute("COMMIT", operation: "end")
        XCTAssertEqual(try StoreFixture.query(copy, "SELECT count(*) FROM log"), "550")
        XCTAssertEqual(try StoreFixture.query(copy, "PRAGMA integrity_check"), "ok")
    }

    // MARK: helpers

    /// Writes the snapshot's bytes to `path`, then ends the snapshot.
    private func copyOut(_ snapshot: DatabaseSnapshot, to path: String) throws {
        FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var offset: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let got = try buffer.withUnsafeMutableBytes { try snapshot.read(into: $0.baseAddress!, count: $0.count, offset: offset) }
            if got == 0 { break }
            handle.write(Data(buffer[0..<got]))
            offset += Int64(got)
        }
        try handle.close()
        snapshot.finish()
    }

    private func startWriter(database: String, settings: [String] = []) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", TestEnvironment.packageRoot + "/Tests/Support/bank_writer.py", database] + settings
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let ready = readLine(from: output.fileHandleForReading)
        XCTAssertEqual(ready, "ready")
        return (process, input, output)
    }

    /// Rows in the log, read waiting for a writer's lock (a rollback-journal writer holds
    /// an exclusive one while it commits).
    private func logRows(_ database: String) throws -> Int {
        let result = try runTool(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; print(sqlite3.connect(sys.argv[1], timeout=10).execute('SELECT count(*) FROM log').fetchone()[0])",
                database,
            ])
        XCTAssertEqual(result.status, 0, result.stderr)
        return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// Its commits, and the commits refused busy (each tried again).
    private func stopWriter(_ writer: (Process, Pipe, Pipe)) -> (commits: Int, busy: Int) {
        try? writer.1.fileHandleForWriting.close()
        let count = readLine(from: writer.2.fileHandleForReading)
        let busy = readLine(from: writer.2.fileHandleForReading)
        writer.0.waitUntilExit()
        return (Int(count ?? "") ?? -1, Int(busy?.replacingOccurrences(of: "busy ", with: "") ?? "") ?? -1)
    }

    private func readLine(from handle: FileHandle) -> String? {
        var bytes = Data()
        while true {
            let byte = handle.readData(ofLength: 1)
            if byte.isEmpty { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if byte == Data("\n".utf8) { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
    }
}

func onlyBackup(in folder: String) throws -> String {
    let names = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(" Stores.zip") }
    XCTAssertEqual(names.count, 1, "expected exactly one backup in \(folder): \(names)")
    return folder + "/" + (names.first ?? "missing")
}
