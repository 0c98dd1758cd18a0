import Foundation

extension BackupRepository {
    // MARK: look inside a database

    /// Opens a database as a backup holds it, as a read-only SQLite connection, without
    /// restoring or extracting it (see ``BackupDatabase``): only the blocks that hold the
    /// pages a query reads are read, checked and inflated.
    ///
    /// ```swift
    /// let db = try await backups.openDatabase("latest", path: "App.sqlite")
    /// let rows = try db.query("SELECT name FROM ZCUSTOMER WHERE Z_PK = 42")
    /// ```
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest`; a full backup or any point of an
    ///     incremental chain (its pages come from the chain's page deltas and the full).
    ///   - path: The database's path in the store, as `ls` shows it (e.g. `App.sqlite`).
    /// - Throws: ``StoreBackupError/notInBackup(name:paths:)`` when the backup has no such
    ///   file, ``StoreBackupError/passwordRequired(name:)`` and
    ///   ``StoreBackupError/wrongPassword(name:)`` for an encrypted backup,
    ///   ``StoreBackupError/brokenChain(name:reason:)``,
    ///   ``StoreBackupError/corruptArchive(name:reason:)``, or a destination's error.
    public func openDatabase(_ nameOrLatest: String, path: String) async throws -> BackupDatabase {
        try await openDatabase(nameOrLatest, path: path, sharing: nil)
    }

    /// ``openDatabase(_:path:)`` that reads the blocks `sharing` reads through one cache
    /// when both take pages from the same backup: two points of one chain, compared side by
    /// side, then inflate each block of their full once instead of twice.
    func openDatabase(_ nameOrLatest: String, path: String, sharing: BackupDatabase?) async throws -> BackupDatabase {
        do {
            return try await BackupDatabaseOpener(destination: destination, passwords: passwords).open(
                nameOrLatest, path: path, sharing: sharing)
        } catch is CancellationError {
            throw StoreBackupError.cancelled
        }
    }
}
