import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// An archive built by ``ArchiveBuild/run(at:progress:chain:_:)``, not yet published.
struct BuiltArchive: Sendable {
    var path: String
    var manifest: Manifest
    var createdAt: Date
    var size: Int64
    var archiveSeconds: Double
    var throttle: ProgressThrottle
}

/// Builds one backup archive of a stores directory: under the store's lock (finishing a
/// restore a crash left half-done first), asks the app to quiesce, scans, snapshots every
/// database and writes the archive; an incremental is proved against its base before it may
/// be published.
struct ArchiveBuild: Sendable {
    let storesDirectory: String
    let options: CreateOptions
    let password: BackupPassword?
    let logger: Logger
    /// The clock that dates the backup.
    let now: @Sendable () -> Date
    /// The `store` dimension of the metrics it records.
    var metricsStore: String

    var layout: StoreLayout { StoreLayout(storesDirectory: storesDirectory) }

    /// Before the lock: taking it would create the lock file (and its folder) beside a store
    /// that is not there. A store missing mid-swap (its journal says so) is recovered instead.
    func requireStoresDirectory() throws {
        guard FileSystem.fileExists(storesDirectory) || FileSystem.fileExists(layout.journal) else {
            throw StoreBackupError.storesDirectoryMissing(path: storesDirectory)
        }
    }

    /// Locks the store, snapshots and archives it into `archivePath`, then runs `publish`
    /// (still under the lock); the archive file is removed afterwards, whatever happens.
    func run<T: Sendable>(
        at archivePath: String, progress: ProgressHandler?, chain: ChainBuild?,
        _ publish: (BuiltArchive) async throws -> T
    ) async throws -> T {
        try requireStoresDirectory()
        let lock = try StoreLock(storesDirectory: storesDirectory, purpose: "create")
        defer { withExtendedLifetime(lock) {} }
        _ = try layout.recoverIfNeeded(logger: logger)
        TestPausePoint.reach("create-locked")
        if let quiesce = options.quiesce {
            do { try await quiesce() } catch is CancellationError { throw StoreBackupError.cancelled }
        }

        let createdAt = now()
        let throttle = ProgressThrottle(progress)
        let clock = ContinuousClock()
        let archiveStarted = clock.now
        let manifest: Manifest
        do {
            manifest = try await runBlocking(name: "storebackup-create") { cancel in
                try write(to: archivePath, createdAt: createdAt, chain: chain, cancel: cancel, throttle: throttle)
            }
        } catch {
            unlink(archivePath)
            throw error
        }

        defer { unlink(archivePath) }
        TestPausePoint.reach("archive-built")
        let size = (try? FileSystem.lstatInfo(archivePath)).map { Int64($0.st_size) } ?? 0
        let archive = BuiltArchive(
            path: archivePath, manifest: manifest, createdAt: createdAt, size: size,
            archiveSeconds: (clock.now - archiveStarted).inSeconds, throttle: throttle)
        return try await publish(archive)
    }

    /// The blocking part: scan, snapshots, the archive, the chain's proof.
    private func write(
        to archivePath: String, createdAt: Date, chain: ChainBuild?, cancel: CancellationFlag, throttle: ProgressThrottle
    ) throws -> Manifest {
        let level = options.compressionLevel
        throttle.report(BackupProgress(phase: .scanning), force: true)
        chain?.recordFingerprint(storesDirectory: storesDirectory)
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
        // Joined after the snapshots are finished (which stops their checks): defers run last first.
        var prover: WorkerPool.Group?
        defer { prover?.join() }
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
        try chain?.decide()
        let provesPoint = options.provePointsEvery.map { chain?.proofDue(every: $0) == true } ?? false
        if options.checkDatabases && (options.checkDatabasesOfPoints || chain?.isIncremental != true || provesPoint) {
            prover = SnapshotProver.start(scan.items.compactMap { $0.kind == .database ? snapshots[$0.relativePath] : nil })
        }
        var settings = ArchiveWriter.Settings(
            compressionLevel: level, sourcePath: storesDirectory, createdAt: createdAt, password: password)
        settings.proofs = DatabaseProofSettings(password: password, proofKey: options.proofKey)
        if let threads = options.threads { settings.workers = min(max(1, threads), WorkerPool.maximumWidth) }
        if let chain {
            settings.chain = try chain.prepare(
                items: scan.items, snapshots: snapshots, scratchDirectory: scratch, workers: settings.workers, cancel: cancel)
        }
        let writer = ArchiveWriter(settings: settings, cancel: cancel, progress: throttle)
        let manifest = try writer.write(
            items: scan.items, snapshots: snapshots, outsideLinks: outsideLinks, leftOut: scan.leftOut,
            root: (scan.rootPermissions, scan.rootModificationTime), to: archivePath)
        reportDamagedDatabases(snapshots)
        // What create calls good restores: an incremental is checked against its base first.
        try chain?.prove(manifest)
        return manifest
    }

    /// A database that fails its check at create was damaged in the live store: said now, not
    /// on restore day (the backup keeps it faithfully, without a proof).
    private func reportDamagedDatabases(_ snapshots: [String: DatabaseSnapshot]) {
        for (path, snapshot) in snapshots.sorted(by: { $0.key < $1.key }) {
            if case .notRun(let reason) = snapshot.structureCheckResult() {
                logger.debug(
                    "database \(path) was not checked, so it carries no proof: \(reason)", metadata: ["store": "\(storesDirectory)"])
            }
            guard case .damaged(let answer) = snapshot.structureCheckResult() else { continue }
            logger.warning(
                "database \(path) fails PRAGMA integrity_check in the live store (\(answer)); the backup keeps it as it is, and restoring it will need --accept-damaged-databases",
                metadata: ["store": "\(storesDirectory)"])
            BackupMetrics.recordDamagedDatabase(store: metricsStore)
        }
    }
}
