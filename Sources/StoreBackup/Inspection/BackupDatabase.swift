import CSQLite
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A database as one backup holds it, open as a read-only SQLite connection, without
/// restoring or extracting anything: ``BackupRepository/openDatabase(_:path:)`` opens one.
///
/// SQLite reads it through a read-only VFS that serves each page from the 1 MiB block of
/// the backup's entry that holds it: only that block's compressed bytes are read (a `pread`
/// locally, one ranged request from a remote destination), decrypted, inflated and checked
/// against the block's SHA-256 in the manifest (format 4) before SQLite sees them, and a few
/// inflated blocks are kept in a bounded cache. A point of an incremental chain reads each
/// page from the newest page delta that holds it, else from the full. A damaged block fails
/// the query that needs it with ``StoreBackupError/damagedBlock(name:database:block:reason:)``;
/// no row is made from it. Backups of formats 1-3 have no block hashes: their database entry
/// is read once when opened and checked against its SHA-256, then served the same way.
///
/// Nothing can write: the connection is read-only, the file is opened `immutable=1`, its
/// writes return `SQLITE_READONLY`, and ``query(_:)`` refuses statements that would write.
///
/// To compare two backups (or a backup and a live database) in one connection, attach them
/// to this one: ``attach(_:as:)`` and ``attach(liveDatabase:as:)``; then a query names the
/// other's tables as `schema.table`. ``uri`` is the same database for a connection of one's
/// own (any SQLite connection of this process opened with `SQLITE_OPEN_URI`, read-only);
/// the ``BackupDatabase`` must outlive every connection that opened or attached it.
public final class BackupDatabase: @unchecked Sendable {  // every use of the connection holds `lock`
    /// The backup's name.
    public let backupName: String
    /// The database's path in the store (as the backup's manifest lists it).
    public let databasePath: String
    /// The database's size in bytes in that backup.
    public var size: Int64 { file.size }

    private let file: BackupPageFile
    private let lock = NSLock()
    private var connection: OpaquePointer?
    private var attached: [BackupDatabase] = []
    /// Archives downloaded because their destination serves no ranges, removed on close.
    private let downloads: [String]

    init(backupName: String, databasePath: String, file: BackupPageFile, downloads: [String] = []) throws {
        self.backupName = backupName
        self.databasePath = databasePath
        self.file = file
        self.downloads = downloads
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX
        let rc = sqlite3_open_v2(uri, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            downloads.forEach { unlink($0) }
            throw StoreBackupError.sqlite(path: databasePath, operation: "open it in backup \"\(backupName)\"", message: message)
        }
        sqlite3_extended_result_codes(db, 1)
        connection = db
    }

    deinit { close() }

    /// A SQLite URI that opens this database read-only through the backup VFS, for
    /// `sqlite3_open_v2` (with `SQLITE_OPEN_READONLY | SQLITE_OPEN_URI`) or `ATTACH DATABASE`
    /// on a connection opened with `SQLITE_OPEN_URI`. Valid while this object is open.
    public var uri: String {
        "file:/storebackup-backup/\(file.identifier).sqlite?vfs=storebackup-backup&immutable=1&backupdb=\(file.identifier)"
    }

    /// How much of the backup was read so far.
    public struct ReadStatistics: Sendable, Equatable {
        /// Blocks read from the archive (a block kept in the cache is read once).
        public var blocksRead: Int
        /// Compressed bytes of those blocks.
        public var compressedBytesRead: Int64
        /// Bytes fetched from a remote destination so far, for this database's archive (its
        /// directory and manifest too; for a point of a chain, every archive of the chain);
        /// nil for a backup on this machine.
        public var fetchedBytes: Int64?
    }

    /// What was read so far: the blocks of the entry that stores the database whole and, for
    /// a point of a chain, of its page deltas; the bytes fetched from every archive of the chain.
    public var readStatistics: ReadStatistics {
        let read = file.base.statistics
        let deltas = file.chain?.statistics ?? (blocks: 0, compressedBytes: 0)
        let fetched = file.spans.compactMap(\.fetchedBytes)
        return ReadStatistics(
            blocksRead: read.blocks + deltas.blocks, compressedBytesRead: read.compressedBytes + deltas.compressedBytes,
            fetchedBytes: fetched.isEmpty ? nil : fetched.reduce(0, +))
    }

    /// The reason behind the last failed read of this database's pages by any connection
    /// (a damaged block, say), taken: SQLite itself reports only "disk I/O error".
    func takeReadFailure() -> StoreBackupError? { file.takeFailure() }

    /// The database's bytes at `offset`, as SQLite reads them (`offset + count` at most ``size``).
    func bytes(at offset: Int64, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        try bytes.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
        return bytes
    }

    /// A reader of the database's bytes (as ``bytes(at:count:)`` reads them) for one more
    /// thread, with its own inflater and a block cache of `cacheBytes`; for reading in page
    /// order, so the page deltas' blocks it drops are not kept on disk to be read again.
    func threadReader(cacheBytes: Int) -> @Sendable (UnsafeMutableRawBufferPointer, Int64) throws -> Void {
        let file = file, base = file.base.sibling(cacheBytes: cacheBytes)
        let chain = file.chain?.sibling(cacheBytes: cacheBytes, spilling: false)
        return { buffer, offset in try file.read(into: buffer, at: offset, base: base, chain: chain) }
    }

    /// The SHA-256 of the database's bytes in block `number` of `blockSize`, when this
    /// backup's entry holds them whole (no page deltas laid over it) in blocks of that size
    /// whose hashes the manifest gives; nil otherwise.
    func blockHash(_ number: Int, blockSize: Int) -> RawSHA256? {
        guard file.chain == nil, file.base.index.blockSize == blockSize else { return nil }
        return file.base.blockHash(number)
    }

    /// The backup that stores this database whole (this one, or its chain's full), and
    /// the reader of that entry's blocks.
    var baseBackup: String? { file.lineage.backups.last }
    var baseBlocks: EntryBlockReader { file.base }

    /// The pages that may differ between `older` and this database: those the page deltas
    /// between them write. Nil unless `older` is an earlier point of this database's chain.
    func pagesChanged(since older: BackupDatabase) -> Set<Int>? {
        guard older.databasePath == databasePath else { return nil }
        return file.lineage.pagesChanged(since: older.file.lineage)
    }

    /// Closes the connection (and lets go of attached backups). Further queries throw.
    public func close() {
        lock.lock()
        defer { lock.unlock() }
        if let connection { sqlite3_close_v2(connection) }
        connection = nil
        attached = []
        downloads.forEach { unlink($0) }
    }

    /// Runs `sql` (one statement, or several separated by `;`) and returns each statement's
    /// columns and rows. Every statement is prepared first, and a statement that would write
    /// (anything but a read, `EXPLAIN` or a read-only `PRAGMA`) refuses the whole text with
    /// ``StoreBackupError/statementRefused(statement:reason:)`` before any runs.
    ///
    /// All rows are held in memory: for a large result use ``forEachRow(_:columns:row:)``.
    /// - Throws: ``StoreBackupError/damagedBlock(name:database:block:reason:)`` when a block
    ///   the query needs is damaged, ``StoreBackupError/sqlite(path:operation:message:)`` for
    ///   SQL that SQLite refuses.
    public func query(_ sql: String) throws -> [SQLResult] {
        var results: [SQLResult] = []
        try forEachRow(sql) { statement, columns in
            results.append(SQLResult(statement: statement, columns: columns, rows: []))
        } row: { values in
            results[results.count - 1].rows.append(values)
        }
        return results
    }

    /// ``query(_:)`` as a stream: `columns` is called once per statement (its text and
    /// column names), before `row` is called for each of its rows.
    public func forEachRow(
        _ sql: String, columns: (_ statement: String, _ names: [String]) throws -> Void, row: ([SQLValue]) throws -> Void
    ) throws {
        lock.lock()
        defer { lock.unlock() }
        guard let connection else { throw StoreBackupError.sqlite(path: databasePath, operation: "query", message: "closed") }
        let statements = try prepare(sql, on: connection)
        defer { statements.forEach { sqlite3_finalize($0.handle) } }
        for statement in statements {
            let count = Int(sqlite3_column_count(statement.handle))
            try columns(statement.text, (0..<count).map { String(cString: sqlite3_column_name(statement.handle, Int32($0))) })
            while true {
                let rc = sqlite3_step(statement.handle)
                if rc == SQLITE_DONE { break }
                guard rc == SQLITE_ROW else { throw failure(rc, on: connection) }
                try row((0..<count).map { Self.value(statement.handle, Int32($0)) })
            }
        }
    }

    /// Attaches another backup's database to this connection as `schema`; it stays open as
    /// long as this one. A query then reads both: `SELECT … FROM main.t EXCEPT SELECT … FROM
    /// schema.t`.
    public func attach(_ other: BackupDatabase, as schema: String) throws {
        try attach(uri: other.uri, as: schema)
        lock.lock()
        attached.append(other)
        lock.unlock()
    }

    /// Attaches a database file on this machine (a live store's, say) read-only as `schema`,
    /// through SQLite's default VFS. A WAL database needs its `-shm` file (SQLite opens it
    /// read-only); the attached database sees one committed state per statement.
    public func attach(liveDatabase path: String, as schema: String) throws {
        let defaultVFS = sqlite3_vfs_find(nil).map { String(cString: $0.pointee.zName) } ?? "unix"
        try attach(uri: "file:\(SQLiteConnection.uriEscaped(FileSystem.absolutePath(path)))?mode=ro&vfs=\(defaultVFS)", as: schema)
    }

    private func attach(uri: String, as schema: String) throws {
        lock.lock()
        defer { lock.unlock() }
        guard let connection else { throw StoreBackupError.sqlite(path: databasePath, operation: "attach", message: "closed") }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(connection, "ATTACH DATABASE ?1 AS ?2", -1, &statement, nil) == SQLITE_OK else {
            throw failure(sqlite3_errcode(connection), on: connection)
        }
        defer { sqlite3_finalize(statement) }
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        sqlite3_bind_text(statement, 1, uri, -1, transient)
        sqlite3_bind_text(statement, 2, schema, -1, transient)
        let rc = sqlite3_step(statement)
        guard rc == SQLITE_DONE else { throw failure(rc, on: connection) }
    }

    private struct Prepared {
        let handle: OpaquePointer
        let text: String
    }

    /// Every statement of `sql`, prepared; refuses the lot when one would write.
    private func prepare(_ sql: String, on connection: OpaquePointer) throws -> [Prepared] {
        var prepared: [Prepared] = []
        var failed = true
        defer { if failed { prepared.forEach { sqlite3_finalize($0.handle) } } }
        let bytes = Array(sql.utf8CString)
        try bytes.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress!
            let end = buffer.baseAddress! + buffer.count - 1
            while cursor < end {
                var statement: OpaquePointer?
                var tail: UnsafePointer<CChar>?
                guard sqlite3_prepare_v2(connection, cursor, Int32(end - cursor), &statement, &tail) == SQLITE_OK else {
                    throw failure(sqlite3_errcode(connection), on: connection)
                }
                let next = tail ?? end
                guard let statement else {
                    cursor = next
                    continue
                }
                let text = String(decoding: UnsafeRawBufferPointer(start: cursor, count: next - cursor), as: UTF8.self)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                prepared.append(Prepared(handle: statement, text: text))
                if sqlite3_stmt_readonly(statement) == 0 {
                    throw StoreBackupError.statementRefused(
                        statement: text, reason: "it would write, and a backup is read-only (nothing ran)")
                }
                cursor = next
            }
        }
        failed = false
        return prepared
    }

    /// The error behind a failed step: a damaged or unreadable block first (SQLite says
    /// only "disk I/O error"), else SQLite's message.
    private func failure(_ code: Int32, on connection: OpaquePointer) -> StoreBackupError {
        for database in [self] + attached {
            if let failure = database.file.takeFailure() { return failure }
        }
        let message = String(cString: sqlite3_errmsg(connection))
        return .sqlite(path: "\(databasePath) in backup \"\(backupName)\"", operation: "query", message: message)
    }

    private static func value(_ statement: OpaquePointer, _ column: Int32) -> SQLValue {
        switch sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(statement, column))
            guard let text = sqlite3_column_text(statement, column) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, column))
            guard let blob = sqlite3_column_blob(statement, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: blob, count: count)))
        default: return .null
        }
    }
}
