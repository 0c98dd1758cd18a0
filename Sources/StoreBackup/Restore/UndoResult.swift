/// A finished ``StoreHelper/undoRestore(options:hooks:)``.
public struct UndoResult: Sendable {
    /// The stores directory, which holds the store the undone restore had replaced again.
    public var storesDirectory: String
    /// The kept store that was put back, as it was recorded (its path is now the live one).
    public var putBack: ReplacedStore
    /// The processes that had the store open, when ``RestoreOptions/allowStoreInUse`` let the
    /// undo go on regardless; nil when nothing else had it open.
    public var storeInUseWarning: String? = nil
    /// How long the app was stopped, when ``RestoreOptions/appCommands`` stopped and started it.
    public var appDowntime: AppDowntime? = nil
}
