import CSQLite
import Foundation

/// A minimal SQLite connection: enough to checkpoint, hold a read transaction,
/// read pragmas and run integrity checks. Not `Sendable`: opened with SQLITE_OPEN_NOMUTEX,
/// so a connection stays with the code that opened it (``DatabaseSnapshot`` guards its own).
final class SQLiteConnection {
    let path: String
    private(set) var handle: OpaquePointer?

    enum Mode {
        case readWrite, create, readOnly, immutable
        /// Immutable, read through ``UnpackingDatabase``'s VFS: reads wait for the writer.
        case unpacking(UnpackingDatabase)
    }

    /// `path` is in ``EscapedName``'s form (a plain path without `%` is its own escaped form).
    init(path: String, mode: Mode) throws {
        self.path = path
        var flags: Int32 = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI
        // A plain path goes to SQLite as its raw bytes; a URI is ASCII already (its path
        // percent-encoded from the raw bytes), and must not be unescaped again.
        let systemPath = EscapedName.bytes(path).map { CChar(bitPattern: $0) } + [0]
        let filename: [CChar]
        switch mode {
        case .readWrite:
            flags |= SQLITE_OPEN_READWRITE
            filename = systemPath
        case .create:
            flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
            filename = systemPath
        case .readOnly:
            flags |= SQLITE_OPEN_READONLY
            filename = systemPath
        case .immutable:
            // A database nobody else can be using (an extracted copy): no locks, no -shm file.
            flags |= SQLITE_OPEN_READONLY
            filename = Array(("file:" + Self.uriEscaped(path) + "?immutable=1").utf8CString)
        case .unpacking(let file):
            flags |= SQLITE_OPEN_READONLY
            filename = Array(("file:" + Self.uriEscaped(path) + "?immutable=1&" + file.uriParameters).utf8CString)
        }
        var db: OpaquePointer?
        let rc = filename.withUnsafeBufferPointer { sqlite3_open_v2($0.baseAddress, &db, flags, nil) }
        handle = db
        guard rc == SQLITE_OK else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            handle = nil
            throw StoreBackupError.sqlite(path: path, operation: "open", message: message)
        }
        sqlite3_extended_result_codes(db, 1)
    }

    deinit { close() }

    func close() {
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    func setBusyTimeout(milliseconds: Int32) {
        sqlite3_busy_timeout(handle, milliseconds)
    }

    /// Retries a busy lock every 250 µs for about `milliseconds`. SQLite's own busy timeout
    /// sleeps 1, 2, 5 … 50 ms between tries, so beside a writer that commits back to back (and
    /// takes its lock again microseconds after each commit) it almost never lands in a gap;
    /// trying often does.
    func setEagerBusyRetry(milliseconds: Int32) {
        let tries = Int32(max(1, Int(milliseconds) * 4))
        sqlite3_busy_handler(
            handle,
            { limit, count in
                let maximum = Int32(truncatingIfNeeded: Int(bitPattern: limit))
                guard count < maximum else { return 0 }
                usleep(250)
                return 1
            }, UnsafeMutableRawPointer(bitPattern: Int(tries)))
    }

    var lastError: String { handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed" }

    func execute(_ sql: String, operation: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? lastError
            sqlite3_free(message)
            throw StoreBackupError.sqlite(path: path, operation: operation, message: text)
        }
    }

    /// Runs a statement and returns every row as text columns.
    func rows(_ sql: String, operation: String) throws -> [[String]] {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else {
            throw StoreBackupError.sqlite(path: path, operation: operation, message: lastError)
        }
        defer { sqlite3_finalize(statement) }
        var result: [[String]] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else {
                throw StoreBackupError.sqlite(path: path, operation: operation, message: lastError)
            }
            let count = sqlite3_column_count(statement)
            result.append(
                (0..<count).map { column in
                    sqlite3_column_text(statement, column).map { String(cString: $0) } ?? ""
                })
        }
        return result
    }

    func scalar(_ sql: String, operation: String) throws -> String {
        try rows(sql, operation: operation).first?.first ?? ""
    }

    /// `PRAGMA wal_checkpoint(MODE)`; returns (busy, frames in log, frames checkpointed).
    func checkpoint(mode: String) throws -> (busy: Bool, logFrames: Int, checkpointedFrames: Int) {
        let row = try rows("PRAGMA wal_checkpoint(\(mode))", operation: "checkpoint").first ?? []
        let numbers = row.map { Int($0) ?? -1 }
        guard numbers.count == 3 else { return (true, -1, -1) }
        return (numbers[0] != 0, numbers[1], numbers[2])
    }

    /// Runs `PRAGMA integrity_check` (or quick_check) and throws with the first problems it lists.
    func check(quick: Bool) throws {
        let pragma = quick ? "quick_check" : "integrity_check"
        let lines = try rows("PRAGMA \(pragma)(20)", operation: pragma).map { $0.first ?? "" }
        guard lines == ["ok"] else {
            throw StoreBackupError.databaseCheckFailed(path: path, result: lines.prefix(3).joined(separator: "; "))
        }
    }

    /// The path's bytes for a `file:` URI: unreserved ASCII and `/` as they are, every
    /// other byte `%XX` (so the result is also its own escaped form). `path` is in
    /// ``EscapedName``'s form; its raw bytes are what SQLite opens.
    static func uriEscaped(_ path: String) -> String {
        var result = ""
        for byte in EscapedName.bytes(path) {
            let scalar = Unicode.Scalar(byte)
            if byte < 0x80 && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "-._~/".unicodeScalars.contains(scalar)) {
                result.unicodeScalars.append(scalar)
            } else {
                result += String(format: "%%%02X", byte)
            }
        }
        return result
    }
}

/// SQLite files begin with this 16-byte string; that, not the extension, is how we find them.
enum SQLiteHeader {
    static let magic: [UInt8] = Array("SQLite format 3\0".utf8)
    /// SQLite's smallest page size: a database file is a whole number of pages, each a
    /// power of two from 512 to 65536 bytes, so its size is a multiple of this.
    static let smallestPageSize: Int64 = 512

    /// Reads the header through SQLite's own VFS rather than a plain descriptor: when an
    /// app in this process has the database open, SQLite defers closing the file while
    /// locks are held, whereas closing our own descriptor would drop the app's locks.
    /// `path` is in ``EscapedName``'s form.
    static func isDatabase(path: String) -> Bool {
        var header = [UInt8](repeating: 0, count: 16)
        let rc = header.withUnsafeMutableBytes { buffer in
            EscapedName.withSystemPath(path) { sb_sqlite_vfs_read($0, buffer.baseAddress!, 16, 0) }
        }
        return rc == SQLITE_OK && header == magic
    }

    /// ``isDatabase(path:)``, and with the same open, `sample.count` bytes at `offset` (zeros
    /// past the end of the file). `sampleRead` is false when that read failed.
    static func read(path: String, sample: UnsafeMutableRawBufferPointer, at offset: Int64) -> (
        isDatabase: Bool, sampleRead: Bool
    ) {
        var header = [UInt8](repeating: 0, count: 16)
        var sampleRC: Int32 = SQLITE_ERROR
        let rc = header.withUnsafeMutableBytes { buffer in
            EscapedName.withSystemPath(path) {
                sb_sqlite_vfs_read_two(
                    $0, buffer.baseAddress!, 16, 0, sample.baseAddress!, Int32(sample.count), offset, &sampleRC)
            }
        }
        // SQLITE_IOERR_SHORT_READ (a file smaller than the sample's end: the rest is zeros).
        let sampleRead = sampleRC == SQLITE_OK || sampleRC == SQLITE_IOERR | (2 << 8)
        return (rc == SQLITE_OK && header == magic, sampleRead)
    }
}

extension StoreBackupError {
    /// Whether this is SQLite saying a database file is damaged ("database disk image is
    /// malformed", SQLITE_CORRUPT's message), the one place that reads it from the text.
    var isSQLiteDamage: Bool {
        if case .sqlite(_, _, let message) = self { return message.contains("malformed") }
        return false
    }
}
