import Foundation

/// How a diff reaches one database on each side: a backup's database read in place through
/// the backup VFS (``BackupDatabase``: no copy, only the blocks the comparison reads), a
/// live one read-only from the store. ``RowDiffer`` attaches both to its own connection by
/// URI, so each ``BackupDatabase`` stays open until that connection is closed.
enum DiffDatabaseSources {
    /// The newer side of one database's comparison.
    enum Newer: Sendable {
        case backup(BackupDatabase)
        /// A live database's path: read-only, through SQLite's own locking, so a writer
        /// can go on and the diff still reads one committed state (its read transaction).
        case live(String)

        var uri: String {
            switch self {
            case .backup(let database): database.uri
            case .live(let path): DiffDatabaseSources.live(path)
            }
        }

        func close() {
            if case .backup(let database) = self { database.close() }
        }
    }

    /// A live database's read-only URI.
    static func live(_ path: String) -> String {
        "file:" + SQLiteConnection.uriEscaped(path) + "?mode=ro"
    }

    /// Runs `body` with database `path` of backup `name` opened in place (reading the
    /// blocks `sharing` reads through one cache, when they are the same backup's), and
    /// closes it after `body` (and every connection it attached the database to) is done.
    static func withBackup<T>(
        _ repository: BackupRepository, name: String, path: String, sharing: BackupDatabase? = nil,
        _ body: (BackupDatabase) async throws -> T
    ) async throws -> T {
        let database = try await repository.openDatabase(name, path: path, sharing: sharing)
        defer { database.close() }
        return try await body(database)
    }

    /// The error behind a failed comparison: a damaged or unreadable block of a backup's
    /// database (SQLite only says "disk I/O error") first, else `error` as it is.
    static func failure(_ error: any Error, older: BackupDatabase, newer: Newer) -> any Error {
        if let failure = older.takeReadFailure() { return failure }
        if case .backup(let database) = newer, let failure = database.takeReadFailure() { return failure }
        return error
    }
}
