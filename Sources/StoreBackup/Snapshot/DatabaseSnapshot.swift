import CSQLite
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One database frozen at one moment while other connections keep writing.
///
/// How (GUIDE §3, SQLite's wal.c):
/// - WAL databases: a second connection takes the write lock for a moment, so no
///   commit can slip in; meanwhile the WAL is checkpointed into the main file (PASSIVE,
///   which needs no write lock) and the read transaction starts. A reader that begins on
///   a fully checkpointed WAL holds read-lock 0 and reads only the main file; no
///   checkpoint may write into the main file while that lock is held, so the file's
///   first `pageCount` pages stay exactly this snapshot while writers append to the
///   WAL once the write lock is released. We then stream those pages through SQLite's
///   own file handle: one read pass, no extra copy. When the checkpoint cannot finish
///   (another reader holds an older snapshot, or the write lock cannot be had), we retry
///   a few times and then fall back to the backup API.
/// - Rollback-journal databases: a read transaction holds a SHARED lock, which keeps
///   writers out until the copy is done.
// Unchecked: the connection, the file handle and the copy are used only while `lock` is held.
final class DatabaseSnapshot: @unchecked Sendable {
    enum Method: String, Codable, Sendable {
        case walReadLock = "wal-read-lock"
        case sharedLock = "shared-lock"
        case backupCopy = "backup-api-copy"
    }

    let path: String
    let relativePath: String
    let pageSize: Int
    let pageCount: Int
    let journalMode: String
    let method: Method
    var size: Int64 { Int64(pageSize) * Int64(pageCount) }

    /// Taken by ``read(into:count:offset:)`` and ``finish()``: the pipeline's reader thread
    /// reads the snapshot, while the thread that made it may finish it.
    private let lock = NSLock()
    private var connection: SQLiteConnection?
    private var mainFile: UnsafeMutablePointer<sqlite3_file>?
    private var copyDescriptor: Int32 = -1
    private var copyPath: String?
    /// Create's `integrity_check` of this snapshot, when asked for (``startStructureCheck()``).
    private var structureCheck: SnapshotStructureCheck?
    /// The backup-API copy's own connection for that check.
    private var copyCheckConnection: SQLiteConnection?
    /// The archive has read every byte: the transaction ends once the check has too.
    private var readingDone = false

    init(path: String, relativePath: String, scratchDirectory: String) throws {
        self.path = path
        self.relativePath = relativePath
        let connection = try Self.openForSnapshot(path: path)
        // A rollback-journal writer holds its lock through each commit's fsyncs and takes it
        // again at once: reading the journal mode, and the shared lock below, must find a gap.
        connection.setEagerBusyRetry(milliseconds: 5000)
        let mode = try connection.scalar("PRAGMA journal_mode", operation: "read journal mode").lowercased()
        journalMode = mode
        if mode == "wal" { connection.setBusyTimeout(milliseconds: 200) }

        let forced = TestHooks.snapshotMethod
        var chosen: Method?
        if mode == "wal" && forced != Method.backupCopy.rawValue {
            // The write-lock holder; none for a read-only store (then only an empty WAL will do).
            let gate = try? SQLiteConnection(path: path, mode: .readWrite)
            gate?.setBusyTimeout(milliseconds: 200)
            defer { gate?.close() }
            for _ in 0..<8 where chosen == nil {
                if try Self.beginReadOnCheckpointedWAL(connection: connection, gate: gate, path: path) { chosen = .walReadLock }
            }
        } else if mode != "wal" {
            try connection.execute("BEGIN", operation: "begin read transaction")
            _ = try connection.scalar("SELECT count(*) FROM sqlite_master", operation: "start read transaction")
            chosen = .sharedLock
        }

        if let chosen {
            method = chosen
            pageSize = Int(try connection.scalar("PRAGMA page_size", operation: "read page size")) ?? 4096
            pageCount = Int(try connection.scalar("PRAGMA page_count", operation: "read page count")) ?? 0
            guard let file = sb_sqlite_main_file(connection.handle) else {
                throw StoreBackupError.sqlite(path: path, operation: "get file handle", message: "no file handle")
            }
            mainFile = file
            self.connection = connection
        } else {
            method = .backupCopy
            // A scratch name (prefix + pid) in the folder the archive is built in, so a killed
            // run's copy and its companions are swept by the next command there.
            let copy = ScratchFiles.path(in: scratchDirectory, purpose: "snapshot", suffix: ".sqlite")
            copyPath = copy
            do {
                try Self.backupCopy(from: connection, to: copy)
                connection.close()
                let reader = try SQLiteConnection(path: EscapedName.escapedRoot(copy), mode: .readOnly)
                defer { reader.close() }
                pageSize = Int(try reader.scalar("PRAGMA page_size", operation: "read page size")) ?? 4096
                pageCount = Int(try reader.scalar("PRAGMA page_count", operation: "read page count")) ?? 0
            } catch {
                Self.removeCopy(copy)
                throw error
            }
            copyDescriptor = open(copy, O_RDONLY | O_CLOEXEC)
            guard copyDescriptor >= 0 else { throw StoreBackupError.io(path: copy, operation: "open", errno: errno) }
        }
    }

    deinit { finish() }

    /// Reads snapshot bytes; returns the count read (0 at the end).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, offset: Int64) throws -> Int {
        lock.lock()
        defer { lock.unlock() }
        let available = size - offset
        guard available > 0 else { return 0 }
        let amount = Int(min(Int64(count), available))
        if let mainFile {
            let rc = sb_sqlite_file_read(mainFile, buffer, Int32(amount), offset)
            guard rc == SQLITE_OK else {
                throw StoreBackupError.sqlite(path: path, operation: "read snapshot", message: "I/O error \(rc)")
            }
            return amount
        }
        try PositionedRead.exactly(
            copyDescriptor, into: UnsafeMutableRawBufferPointer(start: buffer, count: amount), at: offset, path: copyPath ?? path)
        return amount
    }

    /// Marks the snapshot as one whose `PRAGMA integrity_check` will run (``SnapshotProver``):
    /// its read transaction lasts until that check has ended, even once the archive has read it.
    func expectStructureCheck() {
        lock.lock()
        defer { lock.unlock() }
        if structureCheck == nil { structureCheck = SnapshotStructureCheck() }
    }

    /// Runs the check on the calling thread, inside the snapshot's own read transaction (or on
    /// the backup-API copy), so it reads exactly the bytes the archive stores. Writers of a
    /// rollback-journal database wait for it as they wait for the copy.
    func runStructureCheck() {
        lock.lock()
        let check = structureCheck
        var connection = self.connection
        if connection != nil {
            // The archive's reads go through the same file handle: no memory map to share.
            _ = try? connection?.scalar("PRAGMA mmap_size=0", operation: "disable memory map")
        } else if let copyPath, copyCheckConnection == nil {
            copyCheckConnection = try? SQLiteConnection(path: EscapedName.escapedRoot(copyPath), mode: .immutable)
            connection = copyCheckConnection
        }
        lock.unlock()
        guard let check else { return }
        // The archive's reader takes `lock` for each read; the check must not hold it.
        if let connection { check.run(connection) } else { check.end(.notRun("the snapshot was already released")) }
        releaseIfRead()
    }

    /// The check's answer, once it has one; nil when none was started.
    func structureCheckResult() -> StructureCheckResult? {
        lock.lock()
        let check = structureCheck
        lock.unlock()
        return check?.wait()
    }

    /// The archive has read the last byte: the transaction ends now, or when the check does.
    func readingFinished() {
        lock.lock()
        readingDone = true
        let checking = structureCheck.map { !$0.hasEnded } ?? false
        lock.unlock()
        if !checking { release() }
    }

    /// Stops any check and ends the transaction (create is over, or failed).
    func finish() {
        lock.lock()
        let check = structureCheck
        lock.unlock()
        check?.stop()
        _ = check?.wait()
        release()
    }

    private func releaseIfRead() {
        lock.lock()
        let read = readingDone
        lock.unlock()
        if read { release() }
    }

    /// Ends the read transaction (writers and checkpoints proceed) and removes any copy.
    ///
    /// While the read held read-lock 0, no checkpoint could write into the main file, so
    /// the app's commits have piled up in the WAL. Left alone, the app's next automatic
    /// checkpoint would copy them all and sync the file inside one of its commits, which
    /// then takes far longer than the app expects (docs/dev/performance.md). A PASSIVE
    /// checkpoint here does that work on our thread instead; it takes no write lock, so
    /// commits carry on beside it, and the app's own checkpoint finds it busy and skips.
    private func release() {
        lock.lock()
        defer { lock.unlock() }
        copyCheckConnection?.close()
        copyCheckConnection = nil
        if let connection {
            try? connection.execute("COMMIT", operation: "end read transaction")
            if method == .walReadLock { _ = try? connection.checkpoint(mode: "PASSIVE") }
            connection.close()
        }
        connection = nil
        mainFile = nil
        if copyDescriptor >= 0 { close(copyDescriptor); copyDescriptor = -1 }
        if let copyPath { Self.removeCopy(copyPath); self.copyPath = nil }
    }

    /// Removes a backup-API copy with the companions SQLite may have left beside it.
    private static func removeCopy(_ copy: String) {
        for suffix in ["", "-journal", "-wal", "-shm"] { unlink(copy + suffix) }
    }

    private static func openForSnapshot(path: String) throws -> SQLiteConnection {
        do {
            return try SQLiteConnection(path: path, mode: .readWrite)
        } catch {
            // A read-only store can still be backed up; it just cannot be checkpointed.
            return try SQLiteConnection(path: path, mode: .readOnly)
        }
    }

    /// Checkpoints, begins a read, and tells whether the read started on a WAL that is
    /// wholly in the main file (so the read holds read-lock 0). When it did not, the read
    /// transaction is ended again.
    private static func beginReadOnCheckpointedWAL(connection: SQLiteConnection, gate: SQLiteConnection?, path: String) throws -> Bool {
        // Without the write lock first: most frames are copied while writers carry on, so
        // the write lock below is held only for the last few.
        waitForCheckpointLock(connection)
        if let gate, (try? gate.execute("BEGIN IMMEDIATE", operation: "take the write lock")) != nil {
            // Writers wait from here until the ROLLBACK, a few milliseconds at most.
            defer { try? gate.execute("ROLLBACK", operation: "release the write lock") }
            let checkpoint = try? connection.checkpoint(mode: "PASSIVE")
            try beginRead(connection)
            if let checkpoint, !checkpoint.busy, checkpoint.logFrames == checkpoint.checkpointedFrames { return true }
            try connection.execute("COMMIT", operation: "end read transaction")
            return false
        }
        // No write lock to be had (read-only store, or a long write transaction): only a
        // WAL seen empty after the read began is safe.
        _ = try? connection.checkpoint(mode: "TRUNCATE")
        try beginRead(connection)
        var info = stat()
        if EscapedName.withSystemPath(path + "-wal", { stat($0, &info) }) != 0 || info.st_size == 0 { return true }
        try connection.execute("COMMIT", operation: "end read transaction")
        return false
    }

    /// Checkpoints PASSIVE until the checkpoint lock is free (for up to about 2 s). Another
    /// connection's checkpoint (a writer's automatic one, every 1000 frames) holds that lock
    /// for as long as it copies and syncs, and a PASSIVE checkpoint then gives up at once;
    /// on a slow disk that lasts longer than all our attempts would without this wait.
    private static func waitForCheckpointLock(_ connection: SQLiteConnection) {
        for _ in 0..<2000 {
            guard let result = try? connection.checkpoint(mode: "PASSIVE"), result.busy, result.logFrames < 0 else { return }
            usleep(1000)
        }
    }

    private static func beginRead(_ connection: SQLiteConnection) throws {
        try connection.execute("BEGIN", operation: "begin read transaction")
        _ = try connection.scalar("SELECT count(*) FROM sqlite_master", operation: "start read transaction")
    }

    /// The fallback: SQLite's online backup in a single step is one read transaction
    /// on the source, so it is consistent, and WAL writers are not blocked by it.
    private static func backupCopy(from source: SQLiteConnection, to copy: String) throws {
        let destination = try SQLiteConnection(path: EscapedName.escapedRoot(copy), mode: .create)
        defer { destination.close() }
        guard let backup = sqlite3_backup_init(destination.handle, "main", source.handle, "main") else {
            throw StoreBackupError.sqlite(path: source.path, operation: "backup", message: destination.lastError)
        }
        var rc: Int32
        repeat {
            rc = sqlite3_backup_step(backup, -1)
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED { usleep(10_000) }  // a writer holds a lock; retry
        } while rc == SQLITE_BUSY || rc == SQLITE_LOCKED
        sqlite3_backup_finish(backup)
        guard rc == SQLITE_DONE else {
            throw StoreBackupError.sqlite(path: source.path, operation: "backup", message: String(cString: sqlite3_errstr(rc)))
        }
    }
}
