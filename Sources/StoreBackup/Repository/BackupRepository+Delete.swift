import Foundation

extension BackupRepository {
    /// What deleting `nameOrLatest` removes, newest first: with `withDependents`, every
    /// incremental backup that depends on it (directly or through another), then itself.
    /// Without it, a backup others depend on is refused, since they could no longer be
    /// restored. Nothing is deleted: a front end shows this before it asks.
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's exact name, or `latest` for the newest.
    ///   - withDependents: Plan to delete every incremental backup that depends on it too.
    ///
    /// - Throws: ``StoreBackupError/backupHasDependents(name:destination:dependents:)`` when
    ///   the backup has dependents and `withDependents` is false,
    ///   ``StoreBackupError/backupNotFound(name:destination:)`` when there is no such backup.
    public func deletion(of nameOrLatest: String, withDependents: Bool) async throws -> [String] {
        let backup = try await destination.resolve(nameOrLatest)
        let dependents = BackupChains(try await destination.listBackups()).dependents(of: backup.name)
        if !dependents.isEmpty && !withDependents {
            throw StoreBackupError.backupHasDependents(name: backup.name, destination: destination.displayName, dependents: dependents)
        }
        return dependents + [backup.name]
    }

    /// Deletes one backup and, with `withDependents`, every incremental backup that depends on
    /// it, as ``deletion(of:withDependents:)`` plans it: newest first, so that stopping at a
    /// failure (a backup S3 Object Lock keeps, say) never leaves an incremental without its base.
    ///
    /// A backup made on this one while it is being deleted is not seen: delete when no
    /// `create --incremental` runs against this destination.
    ///
    /// - Parameters:
    ///   - name: A backup's exact name, or `latest` for the newest.
    ///   - withDependents: Also delete every incremental backup that depends on it.
    /// - Returns: The names deleted, newest first.
    /// - Throws: as ``deletion(of:withDependents:)``; ``StoreBackupError/invalidBackupName(name:)``
    ///   for a name that is not a backup's. Without `withDependents`, a backup others depend on
    ///   is refused and nothing is deleted.
    @discardableResult
    public func delete(_ name: String, withDependents: Bool = false) async throws -> [String] {
        try await delete(planned: try await deletion(of: name, withDependents: withDependents))
    }

    /// Deletes the backups a ``deletion(of:withDependents:)`` planned, in its order, telling
    /// `deleted` of each as it goes. A dependent someone else removed meanwhile is skipped.
    ///
    /// - Parameters:
    ///   - names: The plan, newest first, as ``deletion(of:withDependents:)`` returned it.
    ///   - deleted: Told each name once it is deleted.
    @discardableResult
    public func delete(planned names: [String], deleted: (@Sendable (String) -> Void)? = nil) async throws -> [String] {
        var done: [String] = []
        for name in names {
            if Task.isCancelled { throw StoreBackupError.cancelled }
            do {
                try await destination.delete(name)
            } catch StoreBackupError.backupNotFound where name != names.last {
                // A dependent someone else removed meanwhile: the outcome we wanted.
                continue
            }
            done.append(name)
            deleted?(name)
        }
        return done
    }
}
