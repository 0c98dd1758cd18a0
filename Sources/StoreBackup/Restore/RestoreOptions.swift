import Foundation

/// How ``StoreHelper/restore(_:options:hooks:progress:)`` may treat the backup and the live
/// store. The defaults are the safe ones: refuse what cannot be checked, refuse a store other
/// processes hold.
public struct RestoreOptions: Sendable {
    /// What may be let through when the backup is read (see ``ExtractionOptions``).
    public var extraction = ExtractionOptions()

    /// Shell commands that stop the app before the swap and start it after (see
    /// ``AppCommands``); nil: the app is not stopped by the restore (the reload hooks close
    /// its connections, or it does not run). Also what ``StoreHelper/recover(appCommands:)`` starts the
    /// app with after finishing a restore that had stopped it.
    public var appCommands: AppCommands? = nil

    /// Restore even when other processes have the store open (they would go on writing
    /// into the replaced files, and lose those writes), with a warning in the result and the
    /// log. Off by default: a restore is refused with ``StoreBackupError/storeInUse(reason:remedy:)``
    /// when ``StoreUsage`` finds another process holding the store, or cannot see every process.
    public var allowStoreInUse = false

    /// Restore when the in-use check could not see every process (not root: other users'
    /// open files are unreadable), with a warning, while still refusing for every process it
    /// did see holding the store. For an app running as its own user, whose store no other
    /// user's process opens. Off by default, like the command line.
    public var allowUnseenProcesses = false

    /// Also look for other processes before downloading and unpacking, to fail fast. The
    /// check after ``ReloadHooks/willSwap`` always runs. Turn this off when `willSwap` is what
    /// closes another process's connections. Skipped when ``appCommands`` stop the app.
    public var checkStoreInUseEarly = true

    /// Seconds the store a restore replaces is kept beside it as `<store>_Replaced`, for
    /// ``StoreHelper/undoRestore(options:hooks:)``; 0 removes it at the commit. It is
    /// renamed, not copied (no extra downtime), but holds its disk space until the next
    /// committed restore replaces it or the first command on the store after this time
    /// removes it. It is not kept when that would leave less free space than a restore of a
    /// store of the restored one's size needs (the result's ``RestoreResult/keepWarning`` says so).
    public var keepReplaced: TimeInterval = RestoreOptions.defaultKeepReplaced

    /// How long a replaced store is kept when nothing else is said: 7 days.
    public static let defaultKeepReplaced: TimeInterval = 7 * 86_400

    /// Build the new store from the live one and the backup: files and database blocks whose
    /// SHA-256 already matches the manifest's are copied from the live store, and only the
    /// rest is read from the backup (from a remote destination that serves byte ranges, only
    /// those bytes are fetched). Databases are compared per 1 MiB block where the backup lists
    /// block hashes (format 4), else whole. The result is checked and swapped in exactly as a
    /// full restore's. A full restore is made instead, and said in ``RestoreResult/delta``,
    /// when there is no live store, it cannot be read, the backup has no manifest, or it is
    /// incremental (restored from its chain). Off by default: see docs/delta-restore.md for
    /// when it is faster.
    public var delta = false

    /// The safe defaults, or as given.
    public init(
        extraction: ExtractionOptions = ExtractionOptions(), appCommands: AppCommands? = nil, allowStoreInUse: Bool = false,
        allowUnseenProcesses: Bool = false, checkStoreInUseEarly: Bool = true,
        keepReplaced: TimeInterval = RestoreOptions.defaultKeepReplaced, delta: Bool = false
    ) {
        self.keepReplaced = keepReplaced
        self.delta = delta
        self.extraction = extraction
        self.appCommands = appCommands
        self.allowStoreInUse = allowStoreInUse
        self.allowUnseenProcesses = allowUnseenProcesses
        self.checkStoreInUseEarly = checkStoreInUseEarly
    }
}
