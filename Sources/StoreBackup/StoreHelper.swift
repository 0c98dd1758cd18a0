import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Compression levels by name, as the command line takes them.
public enum CompressionLevel {
    /// Deflate level 1: the fastest that still compresses.
    public static let fast = 1
    /// Level 1 deflate (with incompressible files stored) keeps create fast; see docs/performance.md.
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

/// A finished backup.
public struct BackupResult: Sendable {
    /// The name it was published under, e.g. `2026-11-22 031507 Stores.zip`.
    public var name: String
    /// The archive's size in bytes.
    public var size: Int64
    /// The destination's ``BackupDestination/displayName``.
    public var destination: String
    /// What the archive holds: every file with its checksum, and each database's snapshot details.
    public var manifest: Manifest
    /// Seconds spent on the snapshot and the archive (scan to the closed zip).
    public var archiveSeconds: Double = 0
    /// Seconds spent publishing the archive at the destination (upload, or rename for a local folder).
    public var uploadSeconds: Double = 0

    /// "full" or "incremental" (format 3; every earlier backup is a full one).
    public var kind: String { manifest.kind ?? "full" }
    /// An incremental backup's base (the backup it applies onto); nil for a full one.
    public var base: String? { manifest.base?.name }

    /// Links that point outside the stores directory (escaped paths): the backup holds
    /// them, and restore makes them only with ``StoreHelper/allowOutsideLinks``.
    public var outsideLinks: [String] { manifest.outsideLinks ?? [] }
    /// Sockets and device files left out of the backup, each as "path (what it is)".
    public var leftOut: [String] { manifest.leftOut ?? [] }
    /// Why this backup is a full one although an incremental was asked for (``StoreHelper/incremental``):
    /// no usable chain state, a chain that is broken at the destination, the policy. Nil otherwise.
    public var fullReason: String? = nil
    /// Set when the backup's name could not follow the destination's newest (see ``warnings``).
    var nameWarning: String? = nil
    /// One line per thing `create` warned about (the same lines went to the logger).
    public var warnings: [String] {
        var targets: [String: String] = [:]
        for file in manifest.files { if let target = file.linkTarget { targets[file.path] = target } }
        return BackupWarnings.lines(outsideLinks: outsideLinks, leftOut: leftOut, targets: targets) + (nameWarning.map { [$0] } ?? [])
    }
}

/// The warnings of a backup that is good but not restored exactly by default.
enum BackupWarnings {
    static func lines(outsideLinks: [String], leftOut: [String], targets: [String: String] = [:]) -> [String] {
        outsideLinks.map { link in
            let target = targets[link].map { " -> \($0)" } ?? ""
            let loops = !targets.isEmpty && ArchiveTree.escape(ofLink: link, in: targets) == .loop
            let what = loops ? "loops (it leads back through itself)" : "points outside the stores directory"
            return
                "the link \(link)\(target) \(what): it is in the backup, but restore makes it only when allowed to (--allow-outside-links)"
        } + leftOut.map { "\($0) is not in the backup: sockets and device files cannot be backed up" }
    }
}

/// The front door: back up, list, restore, verify and delete one stores directory's backups.
///
/// Every operation that touches the store takes the store's lock first and finishes
/// any restore a crash left half-done. Long work runs on its own threads; cancelling
/// the calling task cancels it and leaves no partial backup and an untouched store.
/// Failures are thrown as ``StoreBackupError``.
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
    /// Deflate level 0-9 for ``createBackup(progress:)``; see ``CompressionLevel``.
    public var compressionLevel: Int
    /// Encrypt new backups: every entry, the manifest included, as WinZip AES-256 with the
    /// password from `passwords` (which must then be set).
    public var encrypt: Bool
    /// Where the password comes from: for `encrypt`, and when restoring an encrypted backup
    /// (asked only then, and checked before anything is extracted).
    public var passwords: PasswordProvider?

    /// Called by ``createBackup(progress:)`` once it holds the store's lock, just before it
    /// reads the store: an app that keeps data in memory flushes it to its databases here.
    ///
    /// Optional: create is consistent without the app's help (each database is read as one
    /// committed state while writers carry on). Throwing from the hook abandons the backup
    /// with nothing published.
    public var quiesce: (@Sendable () async throws -> Void)? = nil

    /// Restore a backup that has no manifest (made by hand or by another tool), checking
    /// only CRCs and `PRAGMA integrity_check`. Off by default: such a backup is refused.
    public var allowUnverified = false

    /// Restore a backup whose databases fail `PRAGMA integrity_check` while matching the
    /// SHA-256 the backup recorded: they were already damaged in the live store when the
    /// backup was made, and come back exactly as they were then (listed in
    /// ``RestoreResult/damagedDatabases``). Off by default: such a backup is refused with
    /// ``StoreBackupError/databaseDamagedAtSource(name:databases:result:)``.
    public var acceptDamagedDatabases = false

    /// Shell commands that stop the app before the swap and start it after (see
    /// ``AppCommands``); nil: the app is not stopped by the restore (the reload hooks close
    /// its connections, or it does not run).
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

    /// Restore (and verify, extract) the links that point outside the stores directory,
    /// such as `shared -> /srv/shared/config.json`, exactly as they were. Only links that
    /// `create` found and recorded in the backup's manifest are made (it warned about each);
    /// any other link leaving the store is still refused as unsafe. Off by default.
    public var allowOutsideLinks = false

    /// How many threads deflate on create; nil: one per core (the fastest backup).
    ///
    /// Fewer leave CPU to the app while the backup runs: on every core, the app's commits wait
    /// for the backup's time slices, which thread priorities cannot prevent when the backup
    /// runs in a session of its own (docs/performance.md).
    public var threads: Int? = nil

    /// Make backups in chains (docs/incremental-backups.md): a full one, then incremental
    /// ones holding only what changed, by this policy. Nil (the default): every backup is a
    /// standalone full one (format 2), as before.
    public var incremental: IncrementalPolicy? = nil

    /// The clock that dates new backups and their chain decisions: the system's; tests step it.
    var now: @Sendable () -> Date = { Date() }

    /// The `store` dimension of the metrics this helper reports (see ``BackupMetrics``), e.g.
    /// the store's name in a configuration; nil reports the stores directory's path.
    public var metricsName: String? = nil

    /// Where the helper says what happened besides its results: a recovered restore
    /// (notice), what it did step by step (debug). The library never writes to stdout or
    /// stderr; without a logger nothing is said.
    public var logger: Logger

    /// Makes a helper for one stores directory.
    ///
    /// - Parameters:
    ///   - storesDirectory: The folder holding the app's databases and files; made absolute.
    ///     It need not exist yet for ``restore(_:hooks:progress:)``.
    ///   - destination: Where backups live, e.g. a ``LocalFolderDestination`` or one made by
    ///     ``DestinationResolver/resolve(_:options:)`` from a URL.
    ///   - compressionLevel: Deflate level 0-9 (0 stores without compressing).
    ///   - encrypt: Encrypt new backups (WinZip AES-256); `passwords` must then be set.
    ///   - passwords: Where the password comes from, for `encrypt` and for restoring encrypted backups.
    ///   - logger: Where the helper reports what it did (see ``logger``); silent by default.
    public init(
        storesDirectory: String, destination: any BackupDestination, compressionLevel: Int = CompressionLevel.default,
        encrypt: Bool = false, passwords: PasswordProvider? = nil, logger: Logger = .disabled
    ) {
        self.storesDirectory = FileSystem.absolutePath(storesDirectory)
        self.destination = destination
        self.compressionLevel = compressionLevel
        self.encrypt = encrypt
        self.passwords = passwords
        self.logger = logger
    }

    var layout: StoreLayout { StoreLayout(storesDirectory: storesDirectory) }

    static func seconds(_ duration: Duration) -> Double {
        duration.inSeconds
    }

    // MARK: create

    /// Takes a consistent snapshot of every database, archives the whole directory and
    /// publishes it to the destination as `<UTC date> Stores.zip`.
    ///
    /// Cancelling the calling task stops the work at the next file or block and throws
    /// ``StoreBackupError/cancelled``; nothing is published and no temporary file remains.
    ///
    /// - Parameter progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Returns: The published backup's name, size and manifest.
    /// - Throws: ``StoreBackupError``, e.g. ``StoreBackupError/storeLocked(path:holder:)``
    ///   when another command is working on this store, ``StoreBackupError/noDatabases(path:)``,
    ///   ``StoreBackupError/destination(destination:reason:)`` when the upload fails.
    public func createBackup(progress: ProgressHandler? = nil) async throws -> BackupResult {
        let started = ContinuousClock.now
        do {
            let result = try await createBackupUnmeasured(progress: progress)
            BackupMetrics.recordBackup(
                store: metricsStoreName, destination: destination.displayName, size: result.size,
                seconds: Self.seconds(ContinuousClock.now - started), at: Date(), kind: result.kind)
            return result
        } catch {
            BackupMetrics.recordBackup(
                store: metricsStoreName, destination: destination.displayName, size: nil,
                seconds: Self.seconds(ContinuousClock.now - started), at: Date())
            throw error
        }
    }

    /// The `store` dimension of this helper's metrics (see ``BackupMetrics``).
    var metricsStoreName: String { metricsName ?? storesDirectory }

    private func createBackupUnmeasured(progress: ProgressHandler?) async throws -> BackupResult {
        if let incremental { return try await createChainedBackup(policy: incremental, progress: progress) }
        let progress = ProgressPlan.stamping(ProgressPlan.create, progress)
        let password = try archivePassword()
        try requireStoresDirectory()
        // Wrong credentials or an unreachable server fail now, not after minutes of archiving.
        try await destination.preflight()
        let archivePath =
            try destination.prepareInPlaceArchive()
            ?? ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "archive", suffix: ".zip")
        return try await withBuiltArchive(at: archivePath, password: password, progress: progress) { archive in
            let published = try await publish(archive, to: destination, progress: progress)
            archive.throttle.report(BackupProgress(phase: .done, bytesDone: archive.size, bytesTotal: archive.size), force: true)
            return published
        }
    }

    /// Before the lock: taking it would create the lock file (and its folder) beside a store
    /// that is not there. A store missing mid-swap (its journal says so) is recovered instead.
    func requireStoresDirectory() throws {
        guard FileSystem.fileExists(storesDirectory) || FileSystem.fileExists(layout.journal) else {
            throw StoreBackupError.storesDirectoryMissing(path: storesDirectory)
        }
    }

    /// The password for a new backup: nil unless ``encrypt``.
    func archivePassword() throws -> BackupPassword? {
        guard encrypt else { return nil }
        guard let passwords else { throw StoreBackupError.passwordUnavailable(reason: "encrypting a backup needs a password") }
        return try passwords.password()
    }

    /// An archive built by ``withBuiltArchive(at:password:progress:_:)``, not yet published.
    struct BuiltArchive: Sendable {
        var path: String
        var manifest: Manifest
        var createdAt: Date
        var size: Int64
        var archiveSeconds: Double
        var throttle: ProgressThrottle
    }

    /// Locks the store, snapshots and archives it into `archivePath`, then runs `publish`
    /// (still under the lock); the archive file is removed afterwards, whatever happens.
    func withBuiltArchive<T: Sendable>(
        at archivePath: String, password: BackupPassword?, progress: ProgressHandler?, chain: ChainBuild? = nil,
        _ publish: (BuiltArchive) async throws -> T
    ) async throws -> T {
        try requireStoresDirectory()
        let lock = try StoreLock(storesDirectory: storesDirectory, purpose: "create")
        defer { withExtendedLifetime(lock) {} }
        _ = try layout.recoverIfNeeded(logger: logger)
        TestPausePoint.reach("create-locked")
        if let quiesce {
            do { try await quiesce() } catch is CancellationError { throw StoreBackupError.cancelled }
        }

        let createdAt = now()
        let throttle = ProgressThrottle(progress)
        let storesDirectory = self.storesDirectory
        let level = compressionLevel
        let logger = self.logger

        let manifest: Manifest
        let clock = ContinuousClock()
        let archiveStarted = clock.now
        do {
            manifest = try await runBlocking(name: "storebackup-create") { cancel in
                throttle.report(BackupProgress(phase: .scanning), force: true)
                let scan = try StoreScanner.scan(storesDirectory: storesDirectory, sampleCompressibility: level > 0)
                var linkTargets: [String: String] = [:]
                for item in scan.items where item.kind == .symlink { linkTargets[item.relativePath] = item.linkTarget ?? "" }
                let outsideLinks = ArchiveTree.outsideLinks(linkTargets)
                // Said now, at create time: the backup is good, but not restored exactly by default.
                for line in BackupWarnings.lines(outsideLinks: outsideLinks, leftOut: scan.leftOut, targets: linkTargets) {
                    logger.warning("\(line)", metadata: ["store": "\(storesDirectory)"])
                }
                guard scan.items.contains(where: { $0.kind == .database }) else {
                    throw StoreBackupError.noDatabases(path: storesDirectory)
                }
                // Restore refuses archives beyond this ceiling; do not make one.
                guard scan.items.count < ArchiveLimits.maxEntries else {
                    throw StoreBackupError.archiveWrite(
                        reason:
                            "\(storesDirectory) holds \(scan.items.count) files and folders; a backup can hold at most \(ArchiveLimits.maxEntries - 1) (split the store, or remove files it no longer needs)"
                    )
                }
                try cancel.throwIfCancelled()
                throttle.report(BackupProgress(phase: .snapshotting), force: true)
                var snapshots: [String: DatabaseSnapshot] = [:]
                defer { snapshots.values.forEach { $0.finish() } }
                let scratch = FileSystem.parentDirectory(of: archivePath)
                for item in scan.items where item.kind == .database {
                    do {
                        snapshots[item.relativePath] = try DatabaseSnapshot(
                            path: item.absolutePath, relativePath: item.relativePath, scratchDirectory: scratch)
                    } catch let error as StoreBackupError where error.isSQLiteDamage {
                        // SQLite noticed on the way (create runs no integrity_check): say what it means.
                        throw StoreBackupError.databaseDamagedInStore(path: item.absolutePath, reason: DamageJudge.sqliteAnswer(error))
                    }
                }
                TestPausePoint.reach("snapshots-held")
                var settings = ArchiveWriter.Settings(
                    compressionLevel: level, sourcePath: storesDirectory,
                    createdAt: createdAt, password: password)
                if let threads { settings.workers = min(max(1, threads), WorkerPool.maximumWidth) }
                if let chain {
                    settings.chain = try chain.prepare(
                        items: scan.items, snapshots: snapshots, scratchDirectory: scratch, workers: settings.workers,
                        cancel: cancel)
                }
                let writer = ArchiveWriter(settings: settings, cancel: cancel, progress: throttle)
                let manifest = try writer.write(
                    items: scan.items, snapshots: snapshots, outsideLinks: outsideLinks,
                    leftOut: scan.leftOut,
                    root: (scan.rootPermissions, scan.rootModificationTime), to: archivePath)
                // What create calls good restores: an incremental is checked against its base first.
                try chain?.prove(manifest)
                return manifest
            }
        } catch {
            unlink(archivePath)
            throw error
        }

        defer { unlink(archivePath) }
        let size = (try? FileSystem.lstatInfo(archivePath)).map { Int64($0.st_size) } ?? 0
        let archive = BuiltArchive(
            path: archivePath, manifest: manifest, createdAt: createdAt, size: size,
            archiveSeconds: Self.seconds(clock.now - archiveStarted), throttle: throttle)
        return try await publish(archive)
    }

    /// Uploads a built archive to `destination` as `<UTC date> Stores.zip`, the date chosen
    /// by ``BackupNameDate`` (from `start`, by default when the archive was built), moving the
    /// name on by a second while another store sharing the destination has taken it.
    func publish(
        _ archive: BuiltArchive, to destination: any BackupDestination, progress: ProgressHandler?,
        start: Date? = nil, baseName: String? = nil
    ) async throws -> BackupResult {
        let clock = ContinuousClock()
        let uploadStarted = clock.now
        let choice = await BackupNameDate.choose(clock: start ?? archive.createdAt, at: destination, base: baseName)
        if let warning = choice.warning { logger.warning("\(warning)", metadata: ["store": "\(storesDirectory)"]) }
        let first = choice.date
        // An incremental's name says which backup it applies onto.
        func nameAt(_ date: Date) -> String {
            baseName.flatMap { BackupName.makeIncremental(for: date, base: $0) } ?? BackupName.make(for: date)
        }
        var name = nameAt(first)
        for attempt in 1...10 {
            do {
                try Task.checkCancellation()
                try await destination.upload(file: archive.path, as: name, progress: progress)
                break
            } catch StoreBackupError.backupExists where attempt < 10 {
                name = nameAt(first.addingTimeInterval(TimeInterval(attempt)))
            } catch is CancellationError {
                throw StoreBackupError.cancelled
            }
        }
        // S3 Object Lock: an incremental's chain stays locked as long as the incremental.
        try await destination.extendChainRetention(of: name)
        var result = BackupResult(
            name: name, size: archive.size, destination: destination.displayName, manifest: archive.manifest,
            archiveSeconds: archive.archiveSeconds, uploadSeconds: Self.seconds(clock.now - uploadStarted))
        result.nameWarning = choice.warning
        return result
    }

    // MARK: list and delete

    /// The destination's backups, newest first.
    public func listBackups() async throws -> [BackupListing] {
        try await destination.sortedBackups()
    }

    /// Deletes one backup from the destination; a backup that incremental backups depend on
    /// is refused (see ``deleteBackup(_:withDependents:)``).
    ///
    /// - Parameter name: A backup's exact name, or `latest` for the newest.
    /// - Throws: ``StoreBackupError/backupNotFound(name:destination:)`` when there is no such backup,
    ///   ``StoreBackupError/invalidBackupName(name:)`` for a name that is not a backup's,
    ///   ``StoreBackupError/backupHasDependents(name:destination:dependents:)`` for a base.
    public func deleteBackup(_ name: String) async throws {
        try await deleteBackup(name, withDependents: false)
    }

    /// Deletes one backup from the destination and, with `withDependents`, every incremental
    /// backup that depends on it, newest first (so a failure midway leaves no incremental
    /// without its base). Returns the names deleted, newest first.
    ///
    /// - Throws: as ``deleteBackup(_:)``; without `withDependents`, a backup others depend
    ///   on is refused with ``StoreBackupError/backupHasDependents(name:destination:dependents:)``
    ///   and nothing is deleted.
    @discardableResult
    public func deleteBackup(_ name: String, withDependents: Bool) async throws -> [String] {
        try await destination.deleteBackup(name, withDependents: withDependents)
    }

    // MARK: restore

    /// Restores `nameOrLatest` into the stores directory (which may not exist yet).
    ///
    /// Downloads, then unpacks into `<store>_New` checking every checksum and running
    /// `PRAGMA integrity_check` on each database; only then swaps it in, keeping the
    /// previous store as `<store>_Old` until `hooks.reload` accepts the new one. If the
    /// reload throws, the new store goes to `<store>_FailedRestore` and the old one is
    /// put back (and reloaded). Each step is journaled, so a crash at any point is
    /// repaired by the next command on this store.
    ///
    /// Cancelling the calling task before the swap throws ``StoreBackupError/cancelled``
    /// and leaves the live store untouched; once the swap has begun it runs to its end.
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest` for the newest.
    ///   - hooks: How the app pauses, reloads and hears of a rollback; the default opens
    ///     every database and runs `PRAGMA quick_check`.
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Throws: ``StoreBackupError``: ``StoreBackupError/reloadFailed(reason:rolledBack:)``
    ///   when `hooks.reload` rejected the restored store (it is kept in `<store>_FailedRestore`),
    ///   ``StoreBackupError/corruptArchive(name:reason:)`` and
    ///   ``StoreBackupError/checksumMismatch(name:entry:)`` for a damaged backup (the live store
    ///   is untouched), ``StoreBackupError/restoreRefused(reason:)``,
    ///   ``StoreBackupError/storeInUse(reason:remedy:)`` when another process has the store open
    ///   (checked before downloading and again after ``ReloadHooks/willSwap``; see ``allowStoreInUse``).
    public func restore(
        _ nameOrLatest: String, hooks: ReloadHooks = .checkDatabases, progress: ProgressHandler? = nil
    ) async throws -> RestoreResult {
        do {
            let result = try await restoreUnmeasured(nameOrLatest, hooks: hooks, progress: progress)
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
        _ nameOrLatest: String, hooks: ReloadHooks, progress: ProgressHandler?
    ) async throws -> RestoreResult {
        var transaction = RestoreTransaction(
            layout: layout, source: destination, passwords: passwords, hooks: hooks,
            logger: logger)
        transaction.allowUnverified = allowUnverified
        transaction.acceptDamagedDatabases = acceptDamagedDatabases
        transaction.appCommands = appCommands
        transaction.allowStoreInUse = allowStoreInUse
        transaction.allowUnseenProcesses = allowUnseenProcesses
        transaction.checkStoreInUseEarly = checkStoreInUseEarly
        transaction.allowOutsideLinks = allowOutsideLinks
        return try await transaction.run(nameOrLatest, progress: progress)
    }

    // MARK: recover

    /// Finishes or undoes a restore that was interrupted (crash, kill -9, power loss).
    ///
    /// Every other operation does this first, so calling it is needed only to repair a
    /// store before the app opens it at startup.
    public func recover() throws -> RecoveryOutcome {
        let lock = try StoreLock(storesDirectory: storesDirectory, purpose: "recover")
        defer { withExtendedLifetime(lock) {} }
        return try layout.recoverIfNeeded(logger: logger, startCommand: appCommands?.start)
    }
}
