import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How the app around a store takes part in a restore, so a server can restore without
/// restarting.
///
/// A restore calls them in this order, after the backup has been downloaded, unpacked
/// beside the live store and checked:
///
/// 1. ``willSwap``: pause writes and close every connection to the store's databases.
///    Throwing abandons the restore before anything is swapped (the unpacked copy is
///    removed) and ``reload`` is called on the untouched live store so the app resumes.
/// 2. The live folder is renamed to `<store>_Old` and the restored one into its place.
/// 3. ``reload``: open the restored store and check that the app can use it. Returning
///    commits the restore. Throwing rejects it: the restored store is moved to
///    `<store>_FailedRestore` (replacing an earlier one: only the newest is kept), the old
///    one is put back, ``reload`` is called again on it, and
///    then ``didRollback`` runs; the restore throws ``StoreBackupError/reloadFailed(reason:rolledBack:)``.
///
/// ```swift
/// let hooks = ReloadHooks(
///     willSwap: { try await database.pauseAndClose() },
///     reload: { directory in try await database.open(directory + "/App.sqlite") },
///     didRollback: { error in logger.warning("restore rejected: \(error)") })
/// try await helper.restore("latest", hooks: hooks)
/// ```
public struct ReloadHooks: Sendable {
    /// Called before the live folder is renamed: pause writes and close connections.
    public var willSwap: @Sendable () async throws -> Void
    /// Called with the stores directory once the restored store is live (and again on the
    /// old store after a rollback): open and validate it; throwing rejects the restore.
    public var reload: @Sendable (_ storesDirectory: String) async throws -> Void
    /// Called with `reload`'s error after a rejected store was moved aside and the old one is
    /// live (and reloaded) again.
    public var didRollback: @Sendable (_ error: Error) async -> Void

    /// Makes hooks; only `reload` is required.
    public init(
        willSwap: @escaping @Sendable () async throws -> Void = {},
        reload: @escaping @Sendable (_ storesDirectory: String) async throws -> Void,
        didRollback: @escaping @Sendable (_ error: Error) async -> Void = { _ in }
    ) {
        self.willSwap = willSwap
        self.reload = reload
        self.didRollback = didRollback
    }

    /// What the command line does: open every database in the store and run `PRAGMA quick_check`.
    public static let checkDatabases = ReloadHooks(reload: { directory in
        try DatabaseCheck.quickCheckAll(in: directory)
    })
}

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
