import Foundation
import Logging

/// The store-side door: back up one stores directory, restore it, and repair it after a crash.
///
/// Every operation here touches the store: it takes the store's lock first and finishes any
/// restore a crash left half-done. Each takes one options value (``CreateOptions``,
/// ``RestoreOptions``). What only reads backups (list, verify, ls, extract, delete, copy,
/// prune) is the store-free door, ``BackupRepository``, which ``repository`` opens on the same
/// destination. Long work runs on its own threads; cancelling the calling task cancels it and
/// leaves no partial backup and an untouched store. Failures are thrown as ``StoreBackupError``.
///
/// ```swift
/// let helper = StoreHelper(storesDirectory: "/var/lib/app/Stores",
///                          destination: try DestinationResolver.resolve("s3://bucket/app"))
/// let backup = try await helper.createBackup()
/// try await helper.restore(backup.name, hooks: ReloadHooks(
///     willSwap: { await database.close() },
///     reload: { directory in try await database.open(directory) }))
/// ```
public struct StoreHelper: Sendable {
    /// The absolute path of the stores directory this helper backs up and restores.
    public let storesDirectory: String
    /// Where backups are published, listed and fetched from.
    public internal(set) var destination: any BackupDestination
    /// Where the password comes from: for ``CreateOptions/encrypt``, and when restoring an
    /// encrypted backup (asked only then, and checked before anything is extracted).
    public var passwords: PasswordProvider?

    /// The `store` dimension of the metrics this helper reports (see ``BackupMetrics``), e.g.
    /// the store's name in a configuration; nil reports the stores directory's path.
    public var metricsName: String? = nil

    /// Where the helper says what happened besides its results: a recovered restore
    /// (notice), what it did step by step (debug). The library never writes to stdout or
    /// stderr; without a logger nothing is said.
    public var logger: Logger

    /// The clock that dates new backups and their chain decisions: the system's; tests step it.
    var now: @Sendable () -> Date = { Date() }

    /// Makes a helper for one stores directory.
    ///
    /// - Parameters:
    ///   - storesDirectory: The folder holding the app's databases and files; made absolute.
    ///     It need not exist yet for ``restore(_:options:hooks:progress:)``.
    ///   - destination: Where backups live, e.g. a ``LocalFolderDestination`` or one made by
    ///     ``DestinationResolver/resolve(_:options:)`` from a URL.
    ///   - passwords: Where the password comes from, for encrypting and for restoring encrypted backups.
    ///   - logger: Where the helper reports what it did (see ``logger``); silent by default.
    public init(
        storesDirectory: String, destination: any BackupDestination, passwords: PasswordProvider? = nil,
        logger: Logger = .disabled
    ) {
        self.storesDirectory = Self.absolutePath(storesDirectory)
        self.destination = destination
        self.passwords = passwords
        self.logger = logger
    }

    /// A stores directory's path as the helper keeps it (absolute, standardised): how a
    /// configuration's store is matched to a path given on a command line.
    public static func absolutePath(_ storesDirectory: String) -> String {
        FileSystem.absolutePath(storesDirectory)
    }

    /// The store-free door on the same destination and password: list, verify, ls, extract,
    /// delete, copy and prune this store's backups.
    public var repository: BackupRepository {
        BackupRepository(destination: destination, passwords: passwords, logger: logger)
    }

    var layout: StoreLayout { StoreLayout(storesDirectory: storesDirectory) }

    /// The `store` dimension of this helper's metrics (see ``BackupMetrics``).
    var metricsStoreName: String { metricsName ?? storesDirectory }

    // MARK: create

    /// Takes a consistent snapshot of every database, archives the whole directory and
    /// publishes it to the destination as `<UTC date> Stores.zip`.
    ///
    /// Cancelling the calling task stops the work at the next file or block and throws
    /// ``StoreBackupError/cancelled``; nothing is published and no temporary file remains.
    ///
    /// - Parameters:
    ///   - options: How to make it: compression, encryption, threads, chains (see ``CreateOptions``).
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Returns: The published backup's name, size and what it holds.
    /// - Throws: ``StoreBackupError``, e.g. ``StoreBackupError/storeLocked(path:holder:)``
    ///   when another command is working on this store, ``StoreBackupError/noDatabases(path:)``,
    ///   ``StoreBackupError/destination(destination:reason:)`` when the upload fails.
    public func createBackup(_ options: CreateOptions = CreateOptions(), progress: ProgressHandler? = nil) async throws
        -> BackupResult
    {
        let outcome = try await createBackup(options, alsoTo: [], progress: progress)[0]
        guard let backup = outcome.backup else { throw outcome.error ?? StoreBackupError.cancelled }
        return backup
    }

    /// Builds one backup and publishes it to ``destination`` and to each of `mirrors` (the
    /// 3-2-1 rule): the store is archived once, and that file is uploaded to every destination
    /// at once, each under the name of the archive's date where free there.
    ///
    /// A destination that fails (its preflight or its upload) does not stop the others;
    /// its outcome carries the error. Metrics are recorded per destination.
    ///
    /// - Returns: One outcome per destination, ``destination`` first, in order.
    /// - Throws: Only when nothing could be built (a locked store, no databases, a missing
    ///   password, cancellation): then nothing was published anywhere.
    public func createBackup(
        _ options: CreateOptions = CreateOptions(), alsoTo mirrors: [any BackupDestination], progress: ProgressHandler? = nil
    ) async throws -> [PublishOutcome] {
        let pipeline = CreatePipeline(
            storesDirectory: storesDirectory, options: options, passwords: passwords, logger: logger, now: now,
            metricsStore: metricsStoreName)
        return try await pipeline.run(to: [destination] + mirrors, progress: progress)
    }

    // MARK: restore

    /// Restores `nameOrLatest` into the stores directory (which may not exist yet).
    ///
    /// Downloads, then unpacks into `<store>_New` checking every checksum and running
    /// `PRAGMA integrity_check` on each database; only then swaps it in, keeping the
    /// previous store as `<store>_Old` until `hooks.reload` accepts the new one; then keeps
    /// it as `<store>_Replaced` for ``undoRestore(options:hooks:)`` (see
    /// ``RestoreOptions/keepReplaced``). If the
    /// reload throws, the new store goes to `<store>_FailedRestore` and the old one is
    /// put back (and reloaded). Each step is journaled, so a crash at any point is
    /// repaired by the next command on this store.
    ///
    /// Cancelling the calling task before the swap throws ``StoreBackupError/cancelled``
    /// and leaves the live store untouched; once the swap has begun it runs to its end.
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest` for the newest.
    ///   - options: What the restore may let through and how it treats the live store
    ///     (see ``RestoreOptions``); the defaults refuse what cannot be checked.
    ///   - hooks: How the app pauses, reloads and hears of a rollback; the default opens
    ///     every database and runs `PRAGMA quick_check`.
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Throws: ``StoreBackupError``: ``StoreBackupError/reloadFailed(reason:rolledBack:)``
    ///   when `hooks.reload` rejected the restored store (it is kept in `<store>_FailedRestore`),
    ///   ``StoreBackupError/corruptArchive(name:reason:)`` and
    ///   ``StoreBackupError/checksumMismatch(name:entry:)`` for a damaged backup (the live store
    ///   is untouched), ``StoreBackupError/restoreRefused(reason:)``,
    ///   ``StoreBackupError/storeInUse(reason:remedy:)`` when another process has the store open
    ///   (checked before downloading and again after ``ReloadHooks/willSwap``; see ``RestoreOptions/allowStoreInUse``).
    public func restore(
        _ nameOrLatest: String, options: RestoreOptions = RestoreOptions(), hooks: ReloadHooks = .checkDatabases,
        progress: ProgressHandler? = nil
    ) async throws -> RestoreResult {
        do {
            let result = try await restoreUnmeasured(nameOrLatest, options: options, hooks: hooks, progress: progress)
            BackupMetrics.recordRestore(store: metricsStoreName, destination: destination.displayName, succeeded: true)
            return result
        } catch {
            BackupMetrics.recordRestore(store: metricsStoreName, destination: destination.displayName, succeeded: false)
            throw error
        }
    }

    /// The whole sequence (lock, recovery, resolving the name, download, unpack, swap, reload,
    /// rollback) is ``RestoreTransaction``'s.
    private func restoreUnmeasured(
        _ nameOrLatest: String, options: RestoreOptions, hooks: ReloadHooks, progress: ProgressHandler?
    ) async throws -> RestoreResult {
        var transaction = RestoreTransaction(
            layout: layout, source: destination, passwords: passwords, hooks: hooks, logger: logger)
        transaction.options = options
        transaction.now = now
        return try await transaction.run(nameOrLatest, progress: progress)
    }

    // MARK: recover

    /// Finishes or undoes a restore that was interrupted (crash, kill -9, power loss).
    ///
    /// Every other operation does this first, so calling it is needed only to repair a
    /// store before the app opens it at startup. It also removes a kept replaced store whose
    /// time is up (see ``RestoreOptions/keepReplaced``).
    ///
    /// - Parameter appCommands: How the app is started again when the interrupted restore
    ///   had stopped it (see ``RestoreOptions/appCommands``).
    public func recover(appCommands: AppCommands? = nil) throws -> RecoveryOutcome {
        let lock = try StoreLock(storesDirectory: storesDirectory, purpose: "recover")
        defer { withExtendedLifetime(lock) {} }
        return try layout.recoverIfNeeded(logger: logger, startCommand: appCommands?.start, now: now())
    }
}
