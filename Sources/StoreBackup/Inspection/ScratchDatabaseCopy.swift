import CSQLite
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A backup's database written whole into a scratch file in `TMPDIR`, for a diff to read
/// through SQLite's default VFS and the OS page cache instead of inflating blocks for each
/// page the rowid-ordered scans jump to (docs/dev/look-inside.md). The file is named as
/// every temporary is (``ScratchFiles``), so a later command sweeps it if this process dies
/// before ``remove()``.
// Unchecked: `descriptor` is set in init and closed once, under `lock`; pread and pwrite
// on it are safe from several threads.
final class ScratchDatabaseCopy: ComparedDatabase, @unchecked Sendable {
    let path: String
    /// The database's size: the file's once it is written.
    let size: Int64
    private let lock = NSLock()
    private var descriptor: Int32

    /// Creates the (empty) file for a database of `size` bytes.
    init(size: Int64) throws {
        let path = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "diff", suffix: ".sqlite")
        let descriptor = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        self.path = path
        self.size = size
        self.descriptor = descriptor
    }

    deinit { remove() }

    /// A URI that opens the copy read-only; `immutable`: nothing else writes it, so SQLite
    /// takes no locks and looks for no journal or WAL.
    var uri: String { "file:" + SQLiteConnection.uriEscaped(path) + "?mode=ro&immutable=1" }

    /// Writes `bytes` at `offset`.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        try FileSystem.write(descriptor, bytes, at: offset, path: path)
    }

    func bytes(at offset: Int64, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let got = try bytes.withUnsafeMutableBytes { try PositionedRead.fill(descriptor, into: $0, at: offset, path: path) }
        guard got == count else { throw StoreBackupError.io(path: path, operation: "read", errno: EIO) }
        return bytes
    }

    func schemaRows(_ sql: String) throws -> [[SQLValue]] {
        try Self.rows(sql, uri: uri, path: path)
    }

    /// The descriptor, for a reader that overlays this copy (``ScratchOverlayCopy``).
    var descriptorForReading: Int32 { descriptor }

    /// The rows of `sql` (integers and texts; anything else as NULL) on the database at `uri`.
    static func rows(_ sql: String, uri: String, path: String) throws -> [[SQLValue]] {
        var db: OpaquePointer?
        defer { sqlite3_close_v2(db) }
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        let operation = "read the schema of a scratch copy"
        guard sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nil) == SQLITE_OK,
            sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK
        else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            throw StoreBackupError.sqlite(path: path, operation: operation, message: message)
        }
        var rows: [[SQLValue]] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { return rows }
            guard rc == SQLITE_ROW else {
                throw StoreBackupError.sqlite(path: path, operation: operation, message: String(cString: sqlite3_errmsg(db)))
            }
            rows.append(
                (0..<sqlite3_column_count(statement)).map { column in
                    switch sqlite3_column_type(statement, column) {
                    case SQLITE_INTEGER: .integer(sqlite3_column_int64(statement, column))
                    case SQLITE_TEXT: .text(String(cString: sqlite3_column_text(statement, column)))
                    default: .null
                    }
                })
        }
    }

    /// Closes and deletes the file (again: nothing).
    func remove() {
        lock.lock()
        defer { lock.unlock() }
        guard descriptor >= 0 else { return }
        close(descriptor)
        unlink(path)
        descriptor = -1
    }
}
