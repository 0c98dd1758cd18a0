import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Checks a store's databases the way the command line's restore does.
public enum DatabaseCheck {
    /// Opens every SQLite database under `directory` (found by header) and runs quick_check.
    ///
    /// A database this process has just passed through `PRAGMA integrity_check` (restore
    /// does, as it unpacks) and that has not changed since, to the nanosecond of its change
    /// time, is opened and its schema read, without reading all of it a second time.
    public static func quickCheckAll(in directory: String) throws {
        try quickCheckAll(in: directory, recording: false)
    }

    /// As ``quickCheckAll(in:)``; `recording` also records each database that passed as
    /// checked (``CheckedDatabases``), so a reload of the same unchanged bytes after a rename
    /// does not read them again: an undo checks the kept store this way before it stops the app.
    static func quickCheckAll(in directory: String, recording: Bool) throws {
        let scan = try StoreScanner.scan(storesDirectory: directory)
        for item in scan.items where item.kind == .database {
            // Opening a WAL database makes (and on closing removes) its -wal and -shm files,
            // which would change the restored folder's time: it is put back afterwards.
            let folder = FileSystem.parentDirectory(of: item.absolutePath)
            var folderInfo = stat()
            let hasFolderTimes = EscapedName.withSystemPath(folder) { stat($0, &folderInfo) } == 0
            defer {
                if hasFolderTimes {
                    var times = [folderInfo.st_atim, folderInfo.st_mtim]
                    _ = EscapedName.withSystemPath(folder) { utimensat(AT_FDCWD, $0, &times, 0) }
                }
            }
            let checkedInFull = CheckedDatabases.isUnchanged(item.absolutePath)
            let connection = try SQLiteConnection(path: item.absolutePath, mode: .readWrite)
            do {
                defer { connection.close() }
                connection.setBusyTimeout(milliseconds: 5000)
                if checkedInFull {
                    _ = try connection.scalar("SELECT count(*) FROM sqlite_master", operation: "read schema")
                } else {
                    try connection.check(quick: true)
                }
            }
            // Closed first: closing a WAL database may checkpoint, and so change it.
            if recording && !checkedInFull { CheckedDatabases.record(item.absolutePath) }
        }
    }
}
