import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Compression levels by name, as the command line takes them.
public enum CompressionLevel {
    /// Deflate level 1: the fastest that still compresses.
    public static let fast = 1
    /// Level 1 deflate (with incompressible files stored) keeps create fast; see README.
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

    /// How many threads deflate on create; nil: one per core (the fastest backup).
    ///
    /// Fewer leave CPU to the app while the backup runs. On a 2-core virtual machine a backup
    /// on every core made a `synchronous=FULL` writer's slowest commits several times slower
    /// than idle, even at the lowest CPU priority, because the machine's disk I/O itself
    /// needs CPU time; see the README's speed section for the measured figures.
    public var threads: Int? = nil

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
    public init(storesDirectory: String, destination: any BackupDestination, compressionLevel: Int = CompressionLevel.default,
                encrypt: Bool = false, passwords: PasswordProvider? = nil, logger: Logger = .disabled) {
        self.storesDirectory = FileSystem.absolutePath(storesDirectory)
        self.destination = destination
        self.compressionLevel = compressionLevel
        self.encrypt = encrypt
        self.passwords = passwords
        self.logger = logger
    }

    var layout: StoreLayout { StoreLayout(storesDirectory: storesDirectory) }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
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
            BackupMetrics.recordBackup(store: metricsStoreName, destination: destination.displayName, size: result.size,
                                       seconds: Self.seconds(ContinuousClock.now - started), at: Date())
            return result
        } catch {
            BackupMetrics.recordBackup(store: metricsStoreName, destination: destination.displayName, size: nil,
                                       seconds: Self.seconds(ContinuousClock.now - started), at: Date())
            throw error
        }
    }

    /// The `store` dimension of this helper's metrics (see ``BackupMetrics``).
    var metricsStoreName: String { metricsName ?? storesDirectory }

    private func createBackupUnmeasured(progress: ProgressHandler?) async throws -> BackupResult {
        let progress = ProgressPlan.stamping(ProgressPlan.create, progress)
        let password = try archivePassword()
        try requireStoresDirectory()
        // Wrong credentials or an unreachable server fail now, not after minutes of archiving.
        try await destination.preflight()
        let archivePath = try destination.prepareInPlaceArchive()
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
    func withBuiltArchive<T: Sendable>(at archivePath: String, password: BackupPassword?, progress: ProgressHandler?,
                                       _ publish: (BuiltArchive) async throws -> T) async throws -> T {
        try requireStoresDirectory()
        let lock = try StoreLock(storesDirectory: storesDirectory, purpose: "create")
        defer { withExtendedLifetime(lock) {} }
        _ = try layout.recoverIfNeeded(logger: logger)
        TestPausePoint.reach("create-locked")
        if let quiesce {
            do { try await quiesce() } catch is CancellationError { throw StoreBackupError.cancelled }
        }

        let createdAt = Date()
        let throttle = ProgressThrottle(progress)
        let storesDirectory = self.storesDirectory
        let level = compressionLevel

        let manifest: Manifest
        let clock = ContinuousClock()
        let archiveStarted = clock.now
        do {
            manifest = try await runBlocking(name: "storebackup-create") { cancel in
                throttle.report(BackupProgress(phase: .scanning), force: true)
                let scan = try StoreScanner.scan(storesDirectory: storesDirectory)
                guard scan.items.contains(where: { $0.kind == .database }) else {
                    throw StoreBackupError.noDatabases(path: storesDirectory)
                }
                // Restore refuses archives beyond this ceiling; do not make one.
                guard scan.items.count < ArchiveLimits.maxEntries else {
                    throw StoreBackupError.archiveWrite(reason: "\(storesDirectory) holds \(scan.items.count) files and folders; a backup can hold at most \(ArchiveLimits.maxEntries - 1) (split the store, or remove files it no longer needs)")
                }
                try cancel.throwIfCancelled()
                throttle.report(BackupProgress(phase: .snapshotting), force: true)
                var snapshots: [String: DatabaseSnapshot] = [:]
                defer { snapshots.values.forEach { $0.finish() } }
                let scratch = FileSystem.parentDirectory(of: archivePath)
                for item in scan.items where item.kind == .database {
                    snapshots[item.relativePath] = try DatabaseSnapshot(
                        path: item.absolutePath, relativePath: item.relativePath, scratchDirectory: scratch)
                }
                var settings = ArchiveWriter.Settings(compressionLevel: level, sourcePath: storesDirectory,
                                                      createdAt: createdAt, password: password)
                if let threads { settings.workers = min(max(1, threads), WorkerPool.maximumWidth) }
                let writer = ArchiveWriter(settings: settings, cancel: cancel, progress: throttle)
                return try writer.write(items: scan.items, snapshots: snapshots, to: archivePath)
            }
        } catch {
            unlink(archivePath)
            throw error
        }

        defer { unlink(archivePath) }
        let size = (try? FileSystem.lstatInfo(archivePath)).map { Int64($0.st_size) } ?? 0
        let archive = BuiltArchive(path: archivePath, manifest: manifest, createdAt: createdAt, size: size,
                                   archiveSeconds: Self.seconds(clock.now - archiveStarted), throttle: throttle)
        return try await publish(archive)
    }

    /// Uploads a built archive to `destination` as `<UTC date> Stores.zip` (the date `start`,
    /// by default when it was built), moving the name on by a second while another store
    /// sharing the destination has taken it.
    func publish(_ archive: BuiltArchive, to destination: any BackupDestination, progress: ProgressHandler?,
                 start: Date? = nil) async throws -> BackupResult {
        let clock = ContinuousClock()
        let uploadStarted = clock.now
        let first = await Self.firstFreeSecond(from: start ?? archive.createdAt, at: destination)
        var name = BackupName.make(for: first)
        for attempt in 1...10 {
            do {
                try Task.checkCancellation()
                try await destination.upload(file: archive.path, as: name, progress: progress)
                break
            } catch StoreBackupError.backupExists where attempt < 10 {
                name = BackupName.make(for: first.addingTimeInterval(TimeInterval(attempt)))
            } catch is CancellationError {
                throw StoreBackupError.cancelled
            }
        }
        return BackupResult(name: name, size: archive.size, destination: destination.displayName, manifest: archive.manifest,
                            archiveSeconds: archive.archiveSeconds, uploadSeconds: Self.seconds(clock.now - uploadStarted))
    }

    /// `date`, or the second after the destination's newest backup when that one is named
    /// for the same second or a little later. Backups made within one second take the next
    /// free seconds; once retention has deleted the first of them, its name is free again,
    /// and a backup named for it would sort before the others and not be `latest`.
    /// Best effort: a destination that cannot list (write-only credentials) gets `date`,
    /// and a newest backup far ahead (another host's clock) is not followed.
    static func firstFreeSecond(from date: Date, at destination: any BackupDestination) async -> Date {
        let second = date.timeIntervalSince1970.rounded(.down)
        guard let newest = try? await destination.sortedBackups().first(where: \.hasDateInName),
              let newestSecond = BackupName.date(of: newest.name)?.timeIntervalSince1970,
              newestSecond >= second, newestSecond < second + 60 else { return date }
        return Date(timeIntervalSince1970: newestSecond + 1)
    }

    // MARK: list and delete

    /// The destination's backups, newest first.
    public func listBackups() async throws -> [BackupListing] {
        try await destination.sortedBackups()
    }

    /// Deletes one backup from the destination.
    ///
    /// - Parameter name: A backup's exact name, or `latest` for the newest.
    /// - Throws: ``StoreBackupError/backupNotFound(name:destination:)`` when there is no such backup,
    ///   ``StoreBackupError/invalidBackupName(name:)`` for a name that is not a backup's.
    public func deleteBackup(_ name: String) async throws {
        let backup = try await destination.resolve(name)
        try await destination.delete(backup.name)
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
    ///   is untouched), ``StoreBackupError/restoreRefused(reason:)``.
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
        var transaction = RestoreTransaction(layout: layout, source: destination, passwords: passwords, hooks: hooks,
                                             logger: logger)
        transaction.allowUnverified = allowUnverified
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
        return try layout.recoverIfNeeded(logger: logger)
    }
}

extension StoreLayout {
    /// Removes dead commands' temporaries beside the store and in `TMPDIR`, then runs
    /// recovery when a restore journal is present, telling `logger` what it did (notice).
    /// Callers hold the store lock.
    func recoverIfNeeded(logger: Logger) throws -> RecoveryOutcome {
        ScratchFiles.sweep(besideStoreIn: parent)
        guard FileSystem.fileExists(journal) else { return .nothingToDo }
        let outcome = try RestoreTransaction.recover(self)
        if let message = outcome.message {
            logger.notice("\(message)", metadata: ["store": "\(live)"])
        }
        return outcome
    }
}
