/// What a restore with ``RestoreOptions/delta`` took from the live store and what it read
/// from the backup; or, when it made a full restore instead, why.
public struct RestoreDelta: Sendable, Equatable {
    /// True when the new store was built from the live one and the backup; false for a full
    /// restore (see ``reason``).
    public var used: Bool
    /// Why a full restore was made instead (no live store, an incremental backup, a backup
    /// without a manifest, a live store that cannot be read); nil when ``used``.
    public var reason: String?
    /// Bytes copied from the live store: files and database blocks whose SHA-256 matched.
    public var bytesReused: Int64 = 0
    /// Compressed bytes read from the backup: the files and database blocks that differed.
    public var bytesRead: Int64 = 0
    /// Bytes fetched from a remote destination in ranged reads (the entries and blocks read,
    /// and the archive's directory and manifest); nil for a backup read on this machine.
    public var bytesDownloaded: Int64? = nil
    /// Files copied from the live store (databases compared whole included).
    public var filesReused = 0
    /// Files read from the backup (databases read whole included).
    public var filesRead = 0
    /// Database blocks (1 MiB) copied from the live store.
    public var blocksReused = 0
    /// Database blocks read from the backup.
    public var blocksRead = 0

    /// A delta restore's figures, or a full restore and why.
    public init(used: Bool, reason: String? = nil) {
        self.used = used
        self.reason = reason
    }
}
