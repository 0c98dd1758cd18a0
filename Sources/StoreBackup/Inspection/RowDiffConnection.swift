import CSQLite
import Foundation

/// One SQLite connection that sees both sides of a diff: an empty in-memory main database
/// with the older side attached as `a` and the newer as `b`, both read-only, inside one read
/// transaction. Each side is therefore read as one committed state however long the diff
/// takes, and SQLite itself compares keys (with each key column's own collation), so rows
/// stream through prepared statements instead of being loaded.
///
/// Not `Sendable`: opened with SQLITE_OPEN_NOMUTEX, it stays with the code that opened it.
final class RowDiffConnection {
    /// The schema names the two sides are attached as.
    static let older = "a"
    static let newer = "b"

    private var handle: OpaquePointer?
    /// Kept alive while SQLite's progress handler looks at it.
    private var cancel: CancellationFlag?

    /// `older` and `newer` are what ATTACH takes: a path, or a `file:` URI (a backup's
    /// ``BackupDatabase/uri``, which must stay open until ``close()``). A live database must
    /// be opened read-only by its URI.
    init(older: String, newer: String, cancel: CancellationFlag? = nil) throws {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(":memory:", &db, flags, nil) == SQLITE_OK else {
            sqlite3_close_v2(db)
            throw StoreBackupError.sqlite(path: ":memory:", operation: "open", message: "cannot open")
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        // A live writer may hold its lock for a moment; a diff waits rather than fails.
        sqlite3_busy_timeout(db, 10_000)
        if let cancel {
            // A query over a large table runs long inside one step: cancelling interrupts it.
            self.cancel = cancel
            sqlite3_progress_handler(
                db, 10_000,
                { context in
                    Unmanaged<CancellationFlag>.fromOpaque(context!).takeUnretainedValue().isCancelled ? 1 : 0
                }, Unmanaged.passUnretained(cancel).toOpaque())
        }
        try attach(older, as: Self.older)
        try attach(newer, as: Self.newer)
        // Both read transactions start here, together, and last until close.
        try execute("BEGIN")
        _ = try scalar("SELECT (SELECT count(*) FROM a.sqlite_schema) + (SELECT count(*) FROM b.sqlite_schema)")
    }

    deinit { close() }

    func close() {
        guard let handle else { return }
        sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
        sqlite3_close_v2(handle)
        self.handle = nil
    }

    private func attach(_ location: String, as schema: String) throws {
        let statement = try prepare("ATTACH ?1 AS \(schema)")
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_text(statement, 1, location, -1, sb_sqlite_transient())
        guard sqlite3_step(statement) == SQLITE_DONE else {
            throw StoreBackupError.sqlite(path: location, operation: "open for diff", message: lastError)
        }
    }

    /// The table a scoped query joins to read only some rowids (see ``RowDiffQueries``).
    static let scope = "main.storebackup_scope"

    /// Makes ``scope`` hold `ranges` (disjoint), in the in-memory main database.
    func setScope(_ ranges: [ClosedRange<Int64>]) throws {
        try execute("CREATE TABLE IF NOT EXISTS \(Self.scope)(storebackup_low INTEGER NOT NULL, storebackup_high INTEGER NOT NULL)")
        try execute("DELETE FROM \(Self.scope)")
        let statement = try prepare("INSERT INTO \(Self.scope) VALUES (?1, ?2)")
        defer { sqlite3_finalize(statement) }
        for range in ranges {
            sqlite3_bind_int64(statement, 1, range.lowerBound)
            sqlite3_bind_int64(statement, 2, range.upperBound)
            guard sqlite3_step(statement) == SQLITE_DONE else {
                throw StoreBackupError.sqlite(path: "diff", operation: "scope", message: lastError)
            }
            sqlite3_reset(statement)
        }
    }

    var lastError: String { handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed" }

    func execute(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
            throw StoreBackupError.sqlite(path: "diff", operation: "query", message: lastError)
        }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else {
            throw StoreBackupError.sqlite(path: "diff", operation: "query", message: lastError)
        }
        return statement
    }

    /// Runs `sql` with text `arguments` and hands each row to `body` as text columns (a
    /// NULL as nil), one row at a time: nothing is kept between rows.
    func each(_ sql: String, _ arguments: [String] = [], _ body: ([String?]) throws -> Void) throws {
        let statement = try prepare(sql)
        defer { sqlite3_finalize(statement) }
        for (index, argument) in arguments.enumerated() {
            sqlite3_bind_text(statement, Int32(index + 1), argument, -1, sb_sqlite_transient())
        }
        let count = sqlite3_column_count(statement)
        var row = [String?](repeating: nil, count: Int(count))
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { return }
            guard rc == SQLITE_ROW else {
                throw StoreBackupError.sqlite(path: "diff", operation: "query", message: lastError)
            }
            for column in 0..<count {
                row[Int(column)] = sqlite3_column_text(statement, column).map { String(cString: $0) }
            }
            try body(row)
        }
    }

    func rows(_ sql: String, _ arguments: [String] = []) throws -> [[String?]] {
        var result: [[String?]] = []
        try each(sql, arguments) { result.append($0) }
        return result
    }

    func scalar(_ sql: String, _ arguments: [String] = []) throws -> String? {
        try rows(sql, arguments).first?.first ?? nil
    }
}
