import CSQLiteServer

/// A failed SQLite call, with SQLite's own message.
struct SQLiteError: Error, CustomStringConvertible {
    var description: String
}

/// One SQLite connection, just enough for the example: open in WAL mode, run statements
/// with text parameters, read text columns. Not thread-safe; `ItemStore` owns it.
final class SQLiteDatabase {
    private var handle: OpaquePointer?
    let path: String

    /// Opens (creating if needed) the database at `path` in WAL mode.
    init(path: String, create: Bool) throws {
        self.path = path
        let flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(handle)
            handle = nil
            throw SQLiteError(description: "cannot open \(path): \(message)")
        }
        // storebackup's own connection may hold a read snapshot or checkpoint briefly.
        sqlite3_busy_timeout(handle, 5000)
        _ = try query("PRAGMA journal_mode=WAL")
    }

    deinit { close() }

    /// Closes the connection; later calls fail.
    func close() {
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    /// Runs `sql` with `parameters` bound as text and returns every row's columns as text.
    @discardableResult
    func query(_ sql: String, _ parameters: [String] = []) throws -> [[String?]] {
        guard let handle else { throw SQLiteError(description: "\(path) is closed") }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else { throw error(sql) }
        defer { sqlite3_finalize(statement) }
        for (index, value) in parameters.enumerated() {
            sqlite3_bind_text(statement, Int32(index + 1), value, -1, serverapp_sqlite_transient())
        }
        var rows: [[String?]] = []
        while true {
            let step = sqlite3_step(statement)
            if step == SQLITE_DONE { return rows }
            guard step == SQLITE_ROW else { throw error(sql) }
            rows.append(
                (0..<sqlite3_column_count(statement)).map { column in
                    sqlite3_column_text(statement, column).map { String(cString: $0) }
                })
        }
    }

    private func error(_ sql: String) -> SQLiteError {
        SQLiteError(description: "\(sql): \(handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed")")
    }
}
