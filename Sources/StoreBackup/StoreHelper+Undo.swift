import Foundation

extension StoreHelper {
    /// The store the last committed restore replaced, kept beside the live one until
    /// ``ReplacedStore/keptUntil``; nil when none is kept (nothing to undo).
    public var replacedStore: ReplacedStore? { layout.replacedStore() }

    /// Takes the last committed restore back: the store it replaced (kept as
    /// `<store>_Replaced`, see ``RestoreOptions/keepReplaced``) is swapped back in, and the
    /// restored store, with whatever was written to it since, is removed. There is then
    /// nothing left to undo: a second call throws ``StoreBackupError/restoreRefused(reason:)``.
    ///
    /// The swap is a restore's: the store's lock and recovery first, the in-use checks,
    /// ``RestoreOptions/appCommands`` stopping and starting the app around it, `hooks` as a
    /// restore calls them, and each step journaled, so a crash at any point leaves the store
    /// as it was before the undo or after it (the next command finishes the repair). Nothing
    /// is copied: two renames, then the app's reload.
    ///
    /// - Parameters:
    ///   - options: ``RestoreOptions/appCommands``, ``RestoreOptions/allowStoreInUse``,
    ///     ``RestoreOptions/allowUnseenProcesses`` and ``RestoreOptions/checkStoreInUseEarly``
    ///     apply as to a restore; the rest do not.
    ///   - hooks: As for ``restore(_:options:hooks:progress:)``.
    /// - Throws: ``StoreBackupError``: ``StoreBackupError/restoreRefused(reason:)`` when no
    ///   replaced store is kept; ``StoreBackupError/reloadFailed(reason:rolledBack:)`` when
    ///   `hooks.reload` rejected the kept store (the restored store is live again and the
    ///   replaced one kept, as before); ``StoreBackupError/storeInUse(reason:remedy:)``.
    public func undoRestore(options: RestoreOptions = RestoreOptions(), hooks: ReloadHooks = .checkDatabases) async throws
        -> UndoResult
    {
        var transaction = RestoreTransaction(
            layout: layout, source: destination, passwords: passwords, hooks: hooks, logger: logger)
        transaction.options = options
        transaction.now = now
        return try await transaction.undo()
    }
}
