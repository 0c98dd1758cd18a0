import Foundation

/// Compression levels by name, as the command line takes them.
public enum CompressionLevel {
    /// Deflate level 1: the fastest that still compresses.
    public static let fast = 1
    /// Level 1 deflate (with incompressible files stored) keeps create fast (docs/dev/performance.md).
    public static let `default` = 1
    /// Deflate level 9: smallest archives, several times slower than ``fast``.
    public static let best = 9

    /// "fast", "default", "best" or a digit 0-9 (0 stores without compressing).
    public static func parse(_ text: String) -> Int? {
        switch text.lowercased() {
        case "fast": return fast
        case "default": return `default`
        case "best": return best
        default:
            guard let value = Int(text), (0...9).contains(value) else { return nil }
            return value
        }
    }
}

/// How ``StoreHelper/createBackup(_:progress:)`` makes a backup. The defaults make a fast,
/// unencrypted, standalone full backup on every core.
public struct CreateOptions: Sendable {
    /// Deflate level 0-9 (0 stores without compressing); see ``CompressionLevel``.
    public var compressionLevel = CompressionLevel.default

    /// Encrypt the backup: every entry, the manifest included, as WinZip AES-256 with the
    /// password from the helper's ``StoreHelper/passwords`` (which must then be set).
    public var encrypt = false

    /// How many threads deflate; nil: one per core (the fastest backup).
    ///
    /// Fewer leave CPU to the app while the backup runs: on every core, the app's commits wait
    /// for the backup's time slices, which thread priorities cannot prevent when the backup
    /// runs in a session of its own (docs/dev/performance.md).
    public var threads: Int? = nil

    /// Make backups in chains (docs/incremental-backups.md): a full one, then incremental
    /// ones holding only what changed, by this policy. Nil (the default): every backup is a
    /// standalone full one (format 2).
    public var incremental: IncrementalPolicy? = nil

    /// Called once create holds the store's lock, just before it reads the store: an app that
    /// keeps data in memory flushes it to its databases here.
    ///
    /// Optional: create is consistent without the app's help (each database is read as one
    /// committed state while writers carry on). Throwing from the hook abandons the backup
    /// with nothing published.
    public var quiesce: (@Sendable () async throws -> Void)? = nil

    /// Check each database's structure (`PRAGMA integrity_check`) at create, on a thread of its
    /// own while the archive is written: a database already damaged in the live store is
    /// reported now (a warning and ``BackupMetrics/damagedDatabases``), and a database that
    /// passes gets a **proof** in the manifest, so that restore and verify check its bytes'
    /// SHA-256 but skip its `integrity_check` (docs/FORMAT.md, "Database proofs").
    public var checkDatabases = true

    /// With ``checkDatabases``: check the databases of incremental backups too. The
    /// scheduler's points leave it off (docs/incremental-backups.md, "What a point costs"): a
    /// point is proven against its base by its manifest before it is published, and a
    /// restore of it checks its databases, which carry no proof.
    public var checkDatabasesOfPoints = true

    /// With ``checkDatabasesOfPoints`` off (the scheduler's points): a point is checked and
    /// proven anyway when none of its chain's backups was proven for this long, so a restore of
    /// any point, or of a point merged from it, rarely has to run `integrity_check` itself
    /// (docs/incremental-backups.md, "What a point costs"); nil: never.
    var provePointsEvery: TimeInterval? = nil

    /// The key that authenticates the proofs of an unencrypted backup (encrypted backups key
    /// them with their password). Nil: an unencrypted backup gets no proofs, and restore checks
    /// its databases as without them.
    public var proofKey: ProofKey? = nil

    /// For the scheduler's points: how long the chain's names cached in the chain state stand
    /// for a listing of the destination (see ``IncrementalPolicy/fullScanEvery``); nil: the
    /// destination is listed for every backup.
    var trustChainCacheFor: TimeInterval? = nil

    /// For the scheduler's runs: a point that would record the store exactly as the chain's
    /// newest backup does is not published (docs/incremental-backups.md).
    var skipsUnchangedPoint = false

    /// For the scheduler's runs with levels (docs/levels.md): each point is also kept beside
    /// the chain state, and each backup's manifest, until compaction has merged them.
    var keepsPointCopies = false

    /// For the scheduler's runs with levels: a point on an S3 Object Lock chain is locked for
    /// the minute level's lifetime (``LevelLocks``).
    var levels: PointLevelPolicy? = nil

    /// The defaults, or as given.
    public init(
        compressionLevel: Int = CompressionLevel.default, encrypt: Bool = false, threads: Int? = nil,
        incremental: IncrementalPolicy? = nil, quiesce: (@Sendable () async throws -> Void)? = nil
    ) {
        self.compressionLevel = compressionLevel
        self.encrypt = encrypt
        self.threads = threads
        self.incremental = incremental
        self.quiesce = quiesce
    }
}
