import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What the scheduler remembers about one store between runs: the last success, the last
/// failure, the next planned run. One small JSON file per store, replaced atomically and
/// durably (a temporary beside it, fsync, rename, fsync of the folder), so a crash or
/// power cut leaves the old state or the new one.
public struct BackupState: Sendable, Codable, Equatable {
    /// A run that published a backup.
    public struct Success: Sendable, Codable, Equatable {
        /// When the run finished.
        public var at: Date
        /// The new backup's name.
        public var backup: String
        /// The new backup's size in bytes.
        public var size: Int64
        /// How long it took, in seconds: the whole run, or, for one destination of several, building
        /// the archive plus uploading it there.
        public var durationSeconds: Double
        /// A success record.
        public init(at: Date, backup: String, size: Int64, durationSeconds: Double) {
            self.at = at; self.backup = backup; self.size = size; self.durationSeconds = durationSeconds
        }
    }
    /// A run or restore drill that failed.
    public struct Failure: Sendable, Codable, Equatable {
        /// When it finished.
        public var at: Date
        /// What went wrong, as the error describes itself.
        public var error: String
        /// A failure record.
        public init(at: Date, error: String) { self.at = at; self.error = error }
    }

    /// One destination's last success and last failure.
    public struct DestinationRecord: Sendable, Codable, Equatable {
        /// The last backup published there.
        public var lastSuccess: Success?
        /// The last time publishing there failed.
        public var lastFailure: Failure?
        /// A record; empty by default.
        public init(lastSuccess: Success? = nil, lastFailure: Failure? = nil) {
            self.lastSuccess = lastSuccess; self.lastFailure = lastFailure
        }
    }

    /// One verification: a restore drill or the check after a backup was made.
    public struct Verification: Sendable, Codable, Equatable {
        /// When the verification finished.
        public var at: Date
        /// The backups verified (success), or the first that failed (failure).
        public var backups: [String]
        /// Where they were verified (a destination's display name).
        public var destination: String
        /// "drill" or "after-create".
        public var trigger: String
        /// What was wrong (failure only).
        public var error: String?
        /// A verification record; `error` is set for a failure only.
        public init(at: Date, backups: [String], destination: String, trigger: String, error: String? = nil) {
            self.at = at; self.backups = backups; self.destination = destination; self.trigger = trigger; self.error = error
        }
    }

    /// The store's name (``StoreJob/name``); the state file is named after it.
    public var store: String
    /// The absolute path of the store's stores directory.
    public var storesDirectory: String
    /// The store's first destination as configured, its password hidden; nil: the default folder.
    public var destination: String?
    /// With several destinations (`destinations:` in the configuration): each one's last
    /// success and failure, by its display name. nil for a store with one destination.
    public var destinations: [String: DestinationRecord]?
    /// The backup schedule as the configuration writes it, e.g. `daily 02:30`.
    public var schedule: String?
    /// The last run that published a backup (that passed its check after create, when there is one).
    public var lastSuccess: Success?
    /// The last run, or restore drill, that failed; it may be older than ``lastSuccess``.
    public var lastFailure: Failure?
    /// When the most recent run began (successful or not).
    public var lastStarted: Date?
    /// When the service plans the next run; nil when no service is scheduling this store.
    public var nextRun: Date?
    /// The last verification that passed (a restore drill or a check after create).
    public var lastVerifySuccess: Verification?
    /// The last verification that failed.
    public var lastVerifyFailure: Verification?
    /// When the service plans the next restore drill; nil when none is scheduled.
    public var nextVerify: Date?
    /// With levels: when retention by level last started and last ran to its end. It runs
    /// after each merge, an hour after it last ended, and at once when it was cut short.
    public var levelRetentionStarted: Date?
    /// See ``levelRetentionStarted``.
    public var levelRetentionEnded: Date?

    /// The state of a store that has not run yet.
    public init(store: String, storesDirectory: String, destination: String? = nil, schedule: String? = nil) {
        self.store = store
        self.storesDirectory = storesDirectory
        self.destination = destination
        self.schedule = schedule
    }
}

/// Reads and writes `BackupState` files in one folder (`<folder>/<store>.json`).
public struct BackupStateStore: Sendable {
    /// The folder holding the state files (absolute).
    public let directory: String

    /// State files in `directory`, which is created when the first one is saved.
    public init(directory: String) {
        self.directory = FileSystem.absolutePath(directory)
    }

    /// `$STOREBACKUP_STATE_DIR`, else `$XDG_STATE_HOME/storebackup`, else `~/.local/state/storebackup`.
    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let explicit = environment["STOREBACKUP_STATE_DIR"], !explicit.isEmpty { return explicit }
        if let state = environment["XDG_STATE_HOME"], !state.isEmpty { return state + "/storebackup" }
        return (environment["HOME"] ?? NSHomeDirectory()) + "/.local/state/storebackup"
    }

    /// The state file of `store`: `<directory>/<store>.json`.
    public func path(for store: String) -> String { directory + "/" + store + ".json" }

    /// The store's state, or nil when it has none yet. A damaged file reads as none (it is
    /// rewritten at the next run) rather than stopping the service.
    public func load(_ store: String) -> BackupState? {
        guard let data = FileManager.default.contents(atPath: path(for: store)) else { return nil }
        return try? Self.decoder.decode(BackupState.self, from: data)
    }

    /// Every state file in the folder, by store name.
    public func loadAll() -> [BackupState] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.sorted()
            .compactMap { load(String($0.dropLast(5))) }
    }

    /// Writes `state` to its store's file, replacing it atomically and durably (the folder is
    /// created, mode 0700). Use ``update(_:default:_:)`` when another task may write the same store.
    public func save(_ state: BackupState) throws {
        try FileSystem.createDirectories(directory, mode: 0o700)
        ScratchFiles.sweep(directory)
        try DurableFile.write(try Self.encoder.encode(state), to: path(for: state.store))
    }

    /// Loads, changes and saves one store's state. Updates in this process take turns: a
    /// store's backup schedule and its drill schedule write the same file from two tasks.
    @discardableResult
    public func update(
        _ store: String, default initial: @autoclosure () -> BackupState,
        _ change: (inout BackupState) -> Void
    ) throws -> BackupState {
        try Self.turns.withLock { _ in
            var state = load(store) ?? initial()
            change(&state)
            try save(state)
            return state
        }
    }

    private static let turns = Locked(())

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .utcTimestamp
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return encoder
    }()
    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .utcTimestamp
        return decoder
    }()
}
