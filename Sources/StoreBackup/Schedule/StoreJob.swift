import Foundation

/// One store the service backs up on a schedule: what, where, when, and what to keep.
public struct StoreJob: Sendable, Equatable {
    /// A short name, unique in a configuration: it names the state file and log lines.
    public var name: String
    /// The stores directory to back up (`path:`), as an absolute path.
    public var storesDirectory: String
    /// A destination URL or local path (see `DestinationResolver`); nil: the default folder.
    public var destination: String?
    /// Further destinations each backup is also published to (`destinations:` in the
    /// configuration lists ``destination`` first, then these).
    public var mirrors: [String] = []
    /// When to back up (`schedule:`).
    public var schedule: Schedule
    /// Each run starts up to this many seconds (chosen at random) after its scheduled time,
    /// so many machines on one schedule do not all hit a destination at once.
    public var jitter: TimeInterval
    /// Applied after each successful backup; nil keeps everything.
    public var retention: RetentionPolicy?
    /// Deflate level 0-9 (`level:`; 0 stores without compressing); see ``CompressionLevel``.
    public var compressionLevel: Int
    /// Threads that deflate (``CreateOptions/threads``); nil: one per core.
    public var threads: Int? = nil
    /// A file holding the archive password (`encrypt: {password-file: …}`); nil: not encrypted.
    public var passwordFile: String?
    /// Commands to run or URLs to call after each run (`hooks:`); none by default.
    public var hooks: BackupHooks
    /// How `restore` stops and starts the app around the swap (`stop-command`, `start-command`, `stop-timeout`).
    public var appCommands: AppCommands? = nil
    /// Restore drills on a schedule of their own (`verify:` in the configuration); nil: none.
    public var verify: VerifyDrill? = nil
    /// Verify each backup right after it is made, as a drill does (`verify-after-create:`):
    /// a database already damaged in the live store then fails the run instead of becoming
    /// a backup reported good. On by default for scheduled and configured runs.
    public var verifyAfterCreate = true
    /// Backups in chains (`incremental: true`, with `full-every`, `max-chain`,
    /// `max-delta-share`): see ``CreateOptions/incremental``; nil: every backup a full one.
    public var incremental: IncrementalPolicy? = nil
    /// Levels of restore points (`levels:`, with `incremental: true`; docs/levels.md): each
    /// ended hour's and day's points are merged into one, and retention keeps each level for
    /// its span; nil: off.
    public var levels: PointLevelPolicy? = nil
    /// How long `restore` keeps the store it replaces, for `undo` (`keep-replaced:`, seconds;
    /// 0: not kept); nil: ``RestoreOptions/defaultKeepReplaced``.
    public var keepReplaced: TimeInterval? = nil

    /// A job; a relative `storesDirectory` is made absolute. The settings not taken here
    /// (``mirrors``, ``threads``, ``verify`` and the rest) start at their defaults.
    public init(
        name: String, storesDirectory: String, destination: String? = nil, schedule: Schedule,
        jitter: TimeInterval = 0, retention: RetentionPolicy? = nil,
        compressionLevel: Int = CompressionLevel.default, passwordFile: String? = nil,
        hooks: BackupHooks = BackupHooks()
    ) {
        self.name = name
        self.storesDirectory = FileSystem.absolutePath(storesDirectory)
        self.destination = destination
        self.schedule = schedule
        self.jitter = jitter
        self.retention = retention
        self.compressionLevel = compressionLevel
        self.passwordFile = passwordFile
        self.hooks = hooks
    }

    /// The most deflate threads a store may ask for (the library's bound on one group of threads).
    public static let maximumThreads = WorkerPool.maximumWidth

    /// Every destination of this store, ``destination`` first (nil: the default folder).
    public var allDestinations: [String?] { [destination] + mirrors.map { $0 } }

    /// Store names become file names: letters, digits, `.`, `_`, `-`.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 100 && !name.hasPrefix(".")
            && name.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) && $0.isASCII || "._-".unicodeScalars.contains($0) }
    }
}

extension StoreJob {
    /// The retention the service applies: ``retention`` with the rules of ``levels``.
    public var appliedRetention: RetentionPolicy? {
        guard let levels else { return retention }
        var policy = retention ?? RetentionPolicy()
        policy.levels = levels
        return policy
    }

    /// ``incremental`` as the chains are built: with levels, a chain may be as long as its
    /// levels make it (``PointLevelPolicy/chainBound(fullEvery:)``), so only `full-every` and
    /// the delta share start a full.
    var chainPolicy: IncrementalPolicy? {
        guard var policy = incremental else { return nil }
        if levels != nil { policy.maxChainLength = max(policy.maxChainLength, PointLevelPolicy.chainBound(fullEvery: policy.fullEvery)) }
        return policy
    }
}
