/// A finished restore.
public struct RestoreResult: Sendable {
    /// The backup that was restored (the resolved name when `latest` was asked for).
    public var backupName: String
    /// The stores directory that now holds the restored data.
    public var storesDirectory: String
    /// The databases (relative paths) that passed `PRAGMA integrity_check` before the swap.
    public var databasesChecked: [String]
    /// How many entries the archive held.
    public var fileCount: Int
    /// What could not be checked, when ``StoreHelper/allowUnverified`` let a backup without
    /// a manifest through; nil for a fully checked restore.
    public var warning: String? = nil
}
