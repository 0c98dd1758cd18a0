import Foundation

extension BackupDestination {
    /// What deleting `nameOrLatest` removes, newest first: with `withDependents`, every
    /// incremental backup that depends on it (directly or through another), then itself.
    /// Without it, a backup others depend on is refused, since they could no longer be
    /// restored.
    ///
    /// - Throws: ``StoreBackupError/backupHasDependents(name:destination:dependents:)`` when
    ///   the backup has dependents and `withDependents` is false, and what ``resolve(_:)`` throws.
    public func deletion(of nameOrLatest: String, withDependents: Bool) async throws -> [String] {
        let backup = try await resolve(nameOrLatest)
        let dependents = BackupChains(try await listBackups()).dependents(of: backup.name)
        if !dependents.isEmpty && !withDependents {
            throw StoreBackupError.backupHasDependents(name: backup.name, destination: displayName, dependents: dependents)
        }
        return dependents + [backup.name]
    }

    /// Deletes `nameOrLatest` as ``deletion(of:withDependents:)`` plans it, newest first, so
    /// that stopping at a failure (a backup S3 Object Lock keeps, say) never leaves an
    /// incremental backup without its base. Returns the names deleted.
    ///
    /// A backup made on this one while it is being deleted is not seen: delete when no
    /// `create --incremental` runs against this destination.
    @discardableResult
    public func deleteBackup(_ nameOrLatest: String, withDependents: Bool = false) async throws -> [String] {
        let names = try await deletion(of: nameOrLatest, withDependents: withDependents)
        var deleted: [String] = []
        for name in names {
            if Task.isCancelled { throw StoreBackupError.cancelled }
            do {
                try await delete(name)
            } catch StoreBackupError.backupNotFound where name != names.last {
                // A dependent someone else removed meanwhile: the outcome we wanted.
                continue
            }
            deleted.append(name)
        }
        return deleted
    }
}
