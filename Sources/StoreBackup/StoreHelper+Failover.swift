import Foundation

extension StoreHelper {
    /// Restores from the first destination, in the order given, that answers and holds the
    /// backup: ``destination`` first, then each of `fallbacks` (the 3-2-1 rule's other copies).
    ///
    /// A destination that cannot be reached, or does not have the backup, is skipped and
    /// reported to `skipped`; `latest` is resolved at each destination, so it means the newest
    /// backup *there*. Once a destination is chosen the restore runs as
    /// ``restore(_:options:hooks:progress:)`` does, and a failure then is not retried elsewhere (the
    /// live store may already have been swapped and rolled back).
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest`.
    ///   - options: As ``restore(_:options:hooks:progress:)`` takes them.
    ///   - fallbacks: Where to look next, in order.
    ///   - hooks: How the app takes part (see ``ReloadHooks``).
    ///   - skipped: Told each destination passed over and why.
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Returns: The result, whose ``RestoreResult/backupName`` is the name restored.
    /// - Throws: ``StoreBackupError/invalidBackupName(name:)`` at once for a name no
    ///   destination could hold; ``StoreBackupError/restoreRefused(reason:)`` naming every
    ///   destination's reason when none holds it (nothing was changed); else as
    ///   ``restore(_:options:hooks:progress:)``.
    public func restore(
        _ nameOrLatest: String, options: RestoreOptions = RestoreOptions(), failingOverTo fallbacks: [any BackupDestination],
        hooks: ReloadHooks = .checkDatabases,
        skipped: (@Sendable (_ destination: String, _ reason: StoreBackupError) -> Void)? = nil,
        progress: ProgressHandler? = nil
    ) async throws -> RestoreResult {
        let found = try await Self.firstHolding(nameOrLatest, in: [destination] + fallbacks, skipped: skipped)
        var chosen = self
        chosen.destination = found.destination
        return try await chosen.restore(found.backup.name, options: options, hooks: hooks, progress: progress)
    }

    /// The first of `destinations`, in order, that answers and holds `nameOrLatest`
    /// (`latest` is resolved at each). Used by ``restore(_:options:failingOverTo:hooks:skipped:progress:)``
    /// and by front ends that say where they restore from before they start.
    public static func firstHolding(
        _ nameOrLatest: String, in destinations: [any BackupDestination],
        skipped: (@Sendable (_ destination: String, _ reason: StoreBackupError) -> Void)? = nil
    ) async throws(StoreBackupError) -> (destination: any BackupDestination, backup: BackupListing) {
        var reasons: [String] = []
        for destination in destinations {
            do {
                return (destination, try await destination.resolve(nameOrLatest))
            } catch {
                let reason = StoreBackupError.wrapping(error)
                // A malformed name is wrong everywhere, and cancelling means stop.
                if reason == .invalidBackupName(name: nameOrLatest) || reason == .cancelled { throw reason }
                skipped?(destination.displayName, reason)
                reasons.append("\(destination.displayName): \(reason.description)")
            }
        }
        throw .restoreRefused(
            reason: "no destination could provide \"\(nameOrLatest)\" (\(reasons.joined(separator: "; "))); nothing was changed")
    }
}
