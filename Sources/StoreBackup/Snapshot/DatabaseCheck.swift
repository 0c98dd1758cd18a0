import Foundation

/// Checks a store's databases the way the command line's restore does.
public enum DatabaseCheck {
    /// Opens every SQLite database under `directory` (found by header) and runs quick_check.
    ///
    /// A database this process has just passed through `PRAGMA integrity_check` (restore
    /// does, as it unpacks) and that has not changed since, to the nanosecond of its change
    /// time, is opened and its schema read, without reading all of it a second time.
    public static func quickCheckAll(in directory: String) throws {
        let scan = try StoreScanner.scan(storesDirectory: directory)
        for item in scan.items where item.kind == .database {
            let checkedInFull = CheckedDatabases.isUnchanged(item.absolutePath)
            let connection = try SQLiteConnection(path: item.absolutePath, mode: .readWrite)
            defer { connection.close() }
            connection.setBusyTimeout(milliseconds: 5000)
            if checkedInFull {
                _ = try connection.scalar("SELECT count(*) FROM sqlite_master", operation: "read schema")
            } else {
                try connection.check(quick: true)
            }
        }
    }
}
