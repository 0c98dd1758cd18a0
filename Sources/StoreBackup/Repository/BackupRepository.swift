import Foundation
import Logging

/// The store-free door: the backups at one destination, without any stores directory.
///
/// Nothing here touches, locks or recovers a live store: it needs only a destination (and the
/// password of encrypted backups), so it works while a restore holds the store's lock, or on a
/// machine that has no store. ``StoreHelper/repository`` opens one on a helper's destination;
/// what touches the store (create, restore, recover) is ``StoreHelper``'s.
///
/// ```swift
/// let backups = BackupRepository(destination: try DestinationResolver.resolve("s3://bucket/app"))
/// for backup in try await backups.list() { print(backup.name, backup.size) }
/// let results = try await backups.verify(.latest)
/// ```
public struct BackupRepository: Sendable {
    /// Where the backups are.
    public let destination: any BackupDestination
    /// Opens encrypted backups: asked when one is met.
    public var passwords: PasswordProvider?
    /// Where the repository says what it did besides its results; silent by default.
    public var logger: Logger
    /// The size from which ``diff(_:_:options:onRow:)`` copies a backup's database into
    /// `TMPDIR` rather than reading it in place (``ScratchCopies``).
    var diffCopyMinimumBytes: Int64 = 16 << 20

    /// The backups at `destination`; `passwords` opens encrypted ones.
    public init(destination: any BackupDestination, passwords: PasswordProvider? = nil, logger: Logger = .disabled) {
        self.destination = destination
        self.passwords = passwords
        self.logger = logger
    }

    // MARK: list (delete: BackupRepository+Delete.swift)

    /// The destination's backups, newest first (every incremental before its bases).
    public func list() async throws -> [BackupListing] {
        try await destination.sortedBackups()
    }

    // MARK: verify

    /// Checks backups end to end without touching any store: every CRC, every file against
    /// its manifest checksum, and `PRAGMA integrity_check` on each database, in a scratch
    /// folder that is removed afterwards. An incremental backup is checked with its whole
    /// chain, built as restore builds it.
    ///
    /// A damaged backup is reported in its ``VerificationResult`` (`ok == false`, with the
    /// problem), not thrown, so one bad backup does not hide the others.
    ///
    /// - Parameters:
    ///   - selection: `.latest` (the default), `.named(name)` or `.all`.
    ///   - options: What may be let through (a backup without a manifest, recorded outside
    ///     links); damage at the source always fails a backup.
    ///   - metadataOnly: Check only what can be checked without reading file content (the
    ///     archive's structure, names, sizes, links, the manifest): fast, and says so in each
    ///     result's warning.
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Throws: ``StoreBackupError/cancelled`` when the calling task is cancelled,
    ///   ``StoreBackupError/noBackups(destination:)``,
    ///   ``StoreBackupError/backupNotFound(name:destination:)``, or a destination's error.
    public func verify(
        _ selection: BackupSelection = .latest, options: ExtractionOptions = ExtractionOptions(), metadataOnly: Bool = false,
        progress: ProgressHandler? = nil
    ) async throws -> [VerificationResult] {
        let progress = ProgressPlan.stamping(ProgressPlan.verify, progress)
        var verifier = BackupVerifier(destination: destination, passwords: passwords)
        verifier.options = options
        verifier.metadataOnly = metadataOnly
        let results: [VerificationResult]
        do {
            results = try await verifier.verify(selection, progress: progress)
        } catch is CancellationError {
            throw StoreBackupError.cancelled
        }
        // A cancelled check reports its backup as failed; that says nothing about the backup.
        if Task.isCancelled { throw StoreBackupError.cancelled }
        return results
    }

    // MARK: look inside

    /// Lists what a backup holds, from its manifest: every file, folder, link and database
    /// with its size, mode and time. Nothing is written.
    ///
    /// A local folder's archive is read in place; from a remote destination only its central
    /// directory and manifest are read, with ranged requests (a server that ignores ranges:
    /// the archive is downloaded to a temporary file in `TMPDIR`, removed afterwards).
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest` for the newest.
    ///   - paths: Only these archive paths (a file, or a folder and everything beneath it);
    ///     empty lists everything.
    /// - Throws: ``StoreBackupError/notInBackup(name:paths:)`` when a path matches nothing,
    ///   ``StoreBackupError/corruptArchive(name:reason:)`` for an archive that cannot be read,
    ///   ``StoreBackupError/passwordRequired(name:)``, or a destination's error.
    public func contents(of nameOrLatest: String, matching paths: [String] = []) async throws -> BackupContents {
        try await BackupBrowser(destination: destination, passwords: passwords).listContents(nameOrLatest, matching: paths)
    }

    /// Writes some files or folders of a backup (or all of it) into a new folder: one file
    /// back, without a restore.
    ///
    /// Every check a restore makes applies: the archive's names, sizes, links and manifest are
    /// checked as a whole before anything is written, each file written is checked against
    /// its SHA-256 and cut off at its declared size, nothing can land outside the folder, the
    /// declared sizes must fit the file system with a reserve left, and each database written
    /// (the consistent snapshot the backup holds) passes `PRAGMA integrity_check` (one damaged
    /// before the backup was made comes out as it was, named in the result's warning).
    ///
    /// Paths keep their place in the backup: `paths: [".App_SUPPORT/_EXTERNAL_DATA/x"]` writes
    /// `<directory>/.App_SUPPORT/_EXTERNAL_DATA/x`. The files are unpacked into a temporary
    /// folder beside `directory` (named under the library's scratch policy, so a later run
    /// removes it if this one is killed), synced, then renamed into place: on failure there is
    /// no `directory`.
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest` for the newest.
    ///   - paths: Archive paths to write (a file, or a folder and everything beneath it);
    ///     empty writes the whole backup.
    ///   - directory: The folder to create. It must not exist, or be an empty folder; its
    ///     parent must exist.
    ///   - options: What may be let through (a backup without a manifest, recorded outside links).
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Throws: ``StoreBackupError/extractRefused(reason:)`` for an unusable `directory`,
    ///   ``StoreBackupError/notInBackup(name:paths:)`` when a path matches nothing (nothing is
    ///   written), ``StoreBackupError/corruptArchive(name:reason:)``,
    ///   ``StoreBackupError/unsafeArchiveEntry(name:entry:)`` and
    ///   ``StoreBackupError/checksumMismatch(name:entry:)`` for a damaged or hostile backup,
    ///   ``StoreBackupError/cancelled``.
    public func extract(
        _ nameOrLatest: String, paths: [String] = [], into directory: String, options: ExtractionOptions = ExtractionOptions(),
        progress: ProgressHandler? = nil
    ) async throws -> ExtractResult {
        var browser = BackupBrowser(destination: destination, passwords: passwords)
        browser.options = options
        return try await browser.extract(nameOrLatest, paths: paths, into: directory, progress: progress)
    }

    // MARK: copy

    /// Copies one backup, named or `latest` (resolved here), to `target`, and before it every
    /// backup of its chain (the bases it needs, down to the full) that the target lacks, base
    /// first, so the target never holds an incremental without its base. Each is downloaded to
    /// `TMPDIR` and published with the target's `upload`, which checks the copy the way that
    /// destination can; a copy never overwrites (a backup already there under the same name
    /// and size counts as copied, so running again is harmless).
    ///
    /// - Returns: One outcome per backup copied or failed, the named backup's last (also when
    ///   it was already there). A failed copy is an outcome, not a throw.
    /// - Throws: ``StoreBackupError/backupNotFound(name:destination:)`` or
    ///   ``StoreBackupError/noBackups(destination:)`` when this destination lacks it, and any
    ///   error listing either destination.
    public func copy(
        _ nameOrLatest: String, to target: any BackupDestination, progress: ProgressHandler? = nil
    ) async throws -> [BackupCopyOutcome] {
        try await BackupCopier(from: destination, to: target).copyChain(nameOrLatest, progress: progress)
    }

    /// Copies every backup here that `target` lacks, oldest first (each base before the
    /// incrementals that need it); backups already there are reported as
    /// ``BackupCopyOutcome/Status/alreadyThere``.
    public func copyAll(to target: any BackupDestination, progress: ProgressHandler? = nil) async throws -> [BackupCopyOutcome] {
        try await BackupCopier(from: destination, to: target).copyAll(progress: progress)
    }

    // MARK: prune

    /// What `policy` keeps and deletes, without deleting anything: one group per origin (host
    /// and stores directory), so one machine's or one store's backups never push out another's.
    ///
    /// - Parameters:
    ///   - policy: What to keep (last, hourly, daily, weekly, monthly, yearly, within a span).
    ///   - host: Only backups made on this host; nil: every host.
    ///   - storesDirectory: Only backups of this stores directory; nil: every one.
    ///   - originCache: A folder where the origins read from remote backups are kept between
    ///     runs; nil reads them each time.
    ///   - calendar: The calendar whose hours, days, weeks, months and years the policy counts.
    public func retentionPlan(
        _ policy: RetentionPolicy, host: String? = nil, storesDirectory: String? = nil, originCache: String? = nil,
        calendar: Calendar = .current
    ) async throws -> [RetentionGroup] {
        try await pruner(originCache: originCache).plan(policy, host: host, storesDirectory: storesDirectory, calendar: calendar)
    }

    /// Deletes what a ``retentionPlan(_:host:storesDirectory:originCache:calendar:)`` does not
    /// keep, newest first; returns the deleted names. Stops at the first failure, except a
    /// backup S3 Object Lock keeps: that one is kept and handed to `locked`, and the backups its
    /// chain needs are kept too and handed to `keptAsBase` (with the dependent that needs each),
    /// so no incremental is left without its base.
    @discardableResult
    public func prune(
        _ plan: [RetentionGroup], locked: (@Sendable (_ name: String, _ until: Date?) -> Void)? = nil,
        keptAsBase: (@Sendable (_ name: String, _ dependent: String) -> Void)? = nil
    ) async throws -> [String] {
        try await pruner(originCache: nil).execute(plan, locked: locked, keptAsBase: keptAsBase)
    }

    /// Retention by origin at this destination (see ``BackupPruner``).
    func pruner(originCache: String?) -> BackupPruner {
        BackupPruner(destination: destination, stateDirectory: originCache, passwords: passwords)
    }
}
