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
/// 2. No other process may have the store open (``StoreUsage``; this process is not
///    counted): otherwise the restore throws ``StoreBackupError/storeInUse(reason:remedy:)``,
///    the unpacked copy is removed and ``reload`` is called on the untouched live store.
/// 3. The live folder is renamed to `<store>_Old` and the restored one into its place.
/// 4. ``reload``: open the restored store and check that the app can use it. Returning
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
    public var didRollback: @Sendable (_ error: StoreBackupError) async -> Void
    /// Whether `reload` must run on the untouched store when a restore is abandoned after
    /// `willSwap` (the app paused and must resume). Not for ``checkDatabases``: it pauses
    /// nothing, and checking a large live store again would only cost time.
    var resumesApp = true

    /// Makes hooks; only `reload` is required.
    public init(
        willSwap: @escaping @Sendable () async throws -> Void = {},
        reload: @escaping @Sendable (_ storesDirectory: String) async throws -> Void,
        didRollback: @escaping @Sendable (_ error: StoreBackupError) async -> Void = { _ in }
    ) {
        self.willSwap = willSwap
        self.reload = reload
        self.didRollback = didRollback
    }

    /// What the command line does: open every database in the store and run `PRAGMA quick_check`.
    public static let checkDatabases: ReloadHooks = {
        var hooks = ReloadHooks(reload: { directory in try DatabaseCheck.quickCheckAll(in: directory) })
        hooks.resumesApp = false
        return hooks
    }()
}
