/// A finished restore.
public struct RestoreResult: Sendable {
    /// The backup that was restored (the resolved name when `latest` was asked for).
    public var backupName: String
    /// The stores directory that now holds the restored data.
    public var storesDirectory: String
    /// The databases (relative paths) checked with `PRAGMA integrity_check` before the swap;
    /// all passed, except the ``damagedDatabases``.
    public var databasesChecked: [String]
    /// The databases whose `integrity_check` was skipped because a trusted proof covers their
    /// bytes (create checked them; their SHA-256 was checked here as every file's is).
    public var databasesProven: [String] = []
    /// Why each of ``databasesChecked`` was checked rather than trusted (no proof, no proof key,
    /// a proof that does not authenticate, ``ExtractionOptions/checkDatabases``), by path.
    public var checkReasons: [String: String] = [:]
    /// How many entries the archive held.
    public var fileCount: Int
    /// What could not be checked, when ``ExtractionOptions/allowUnverified`` let a backup without
    /// a manifest through; nil for a fully checked restore.
    public var warning: String? = nil
    /// Databases restored although they fail `PRAGMA integrity_check`, because they were
    /// already damaged in the live store when the backup was made and
    /// ``ExtractionOptions/acceptDamagedDatabases`` was set (relative paths); empty otherwise.
    public var damagedDatabases: [String] = []
    /// The processes that had the store open, when ``RestoreOptions/allowStoreInUse`` let the
    /// restore go on regardless; nil when nothing else had it open.
    public var storeInUseWarning: String? = nil
    /// How long the app was stopped, when ``RestoreOptions/appCommands`` stopped and started it.
    public var appDowntime: AppDowntime? = nil
    /// The store this restore replaced, kept for ``StoreHelper/undoRestore(options:hooks:)``
    /// until ``ReplacedStore/keptUntil``; nil when none is (no store was there,
    /// ``RestoreOptions/keepReplaced`` was 0, or there was too little disk space).
    public var replacedStore: ReplacedStore? = nil
    /// Why the replaced store was not kept although it was to be (disk space); nil otherwise.
    public var keepWarning: String? = nil
    /// What ``RestoreOptions/delta`` reused and read, or why it made a full restore; nil when
    /// delta was not asked for.
    public var delta: RestoreDelta? = nil
}
