import Foundation
import Logging

/// The one way a backup is made: checked up front (password, store, each destination's
/// preflight), built once (``ArchiveBuild``, in place at a local folder destination when there
/// is one, else in `TMPDIR`), published to every destination that answered
/// (``ArchivePublishing``), and, for a chain, its state saved once it is published. One
/// destination is the common case; mirrors (the 3-2-1 rule) are more of the same.
struct CreatePipeline: Sendable {
    let storesDirectory: String
    let options: CreateOptions
    let passwords: PasswordProvider?
    let logger: Logger
    /// The clock that dates the backup and its chain decisions.
    let now: @Sendable () -> Date
    /// The `store` dimension of the metrics (see ``BackupMetrics``).
    let metricsStore: String

    /// Makes one backup and publishes it to each of `destinations`. A destination that fails
    /// (its preflight or its upload) does not stop the others: its outcome carries the error,
    /// and metrics are recorded per destination.
    ///
    /// - Returns: One outcome per destination, in order.
    /// - Throws: Only when nothing could be built (a locked store, no databases, a missing
    ///   password, cancellation): then nothing was published anywhere.
    func run(to destinations: [any BackupDestination], progress: ProgressHandler?) async throws -> [PublishOutcome] {
        let progress = ProgressPlan.stamping(ProgressPlan.create, progress)
        let started = ContinuousClock.now
        var outcomes = destinations.map { PublishOutcome(destination: $0.displayName) }
        func recordFailures() {
            for outcome in outcomes where !outcome.succeeded {
                BackupMetrics.recordBackup(
                    store: metricsStore, destination: outcome.destination, size: nil,
                    seconds: (ContinuousClock.now - started).inSeconds, at: Date())
            }
        }
        do {
            let build = ArchiveBuild(
                storesDirectory: storesDirectory, options: options, password: try archivePassword(), logger: logger, now: now,
                metricsStore: metricsStore)
            try build.requireStoresDirectory()
            // A point on a chain this host published needs no listing (see ``cachedChain(for:)``).
            var cached = cachedChain(for: destinations)
            // Points that waited in the spool go out first; while they cannot, so does this one.
            var away: StoreBackupError?
            if let waiting = spooledChain(for: destinations) {
                away = try await drainSpool(waiting, to: destinations[0])
                cached = cachedChain(for: destinations)
            }
            // Wrong credentials or an unreachable server fail now, not after minutes of archiving
            // (a point is small: it fails at its upload instead, one request fewer).
            var reachable: [Int] = []
            for (index, target) in destinations.enumerated() {
                do {
                    if cached == nil { try await target.preflight() }
                    reachable.append(index)
                } catch {
                    outcomes[index].error = StoreBackupError.wrapping(error)
                }
            }
            guard !reachable.isEmpty else { recordFailures(); return outcomes }
            // Built in place at the first destination that can (a local folder: no space taken in TMPDIR).
            var host: (index: Int, archivePath: String)?
            for index in reachable {
                do {
                    if let path = try destinations[index].prepareInPlaceArchive() { host = (index, path); break }
                } catch  where reachable.count == 1 {
                    // The only destination cannot take the archive: fail before building it.
                    outcomes[index].error = StoreBackupError.wrapping(error)
                    recordFailures()
                    return outcomes
                } catch {
                    // It fails at its upload instead.
                }
            }
            let archivePath =
                host?.archivePath ?? ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "archive", suffix: ".zip")
            // Chains: an incremental only when every reachable destination holds the base.
            let chain = await chainBuild(for: reachable.map { destinations[$0] }, password: build.password, cached: cached)
            defer { chain?.discard() }
            outcomes = try await build.run(at: archivePath, progress: progress, chain: chain) { archive in
                if let reason = chain?.fullReason {
                    logger.info("a full backup: \(reason)", metadata: ["store": "\(storesDirectory)"])
                }
                // A scheduled point that would hold nothing new is not published.
                if options.skipsUnchangedPoint, let chain, let base = chain.baseName, chain.isUnchanged(archive.manifest) {
                    do {
                        try chain.recordUnchanged()
                        return outcomes.map {
                            var outcome = $0
                            outcome.unchangedSince = base
                            return outcome
                        }
                    } catch {
                        logger.warning("cannot record the unchanged scan (\(error)); publishing the point")
                    }
                }
                if let away, let cached, let chain, chain.isIncremental {
                    return [spool(archive, chain: chain, cached: cached, to: destinations[0], because: away, outcome: outcomes[0])]
                }
                // Taken before publishing moves the archive (a local folder takes it by rename).
                var sent: String?
                if chain?.isIncremental == true { sent = try? FileDigest.sha256(file: archive.path, length: archive.size) }
                // Levels merge points from local copies: taken before publishing moves the archive.
                var heldCopy: String?
                if options.keepsPointCopies, reachable.count == 1, let chain, chain.isIncremental {
                    heldCopy = chain.folder.holdPointCopy(of: archive.path)
                }
                defer { if let heldCopy { unlink(heldCopy) } }
                var publishing = ArchivePublishing(storesDirectory: storesDirectory, logger: logger, baseName: chain?.baseName)
                publishing.knownBackups = cached?.listing
                publishing.pointsUnlocked = cached?.pointsUnlocked == true
                publishing.startsChain = chain != nil && chain?.isIncremental == false
                if let levels = options.levels, chain?.isIncremental == true {
                    publishing.levelLockUntil = LevelLocks.until(.minute, at: archive.createdAt, levels: levels)
                }
                let results = try await publishing.publish(
                    archive, to: reachable, of: destinations, host: host?.index, progress: progress)
                var published = outcomes
                for (index, result) in results {
                    switch result {
                    case .success(var backup):
                        backup.fullReason = chain?.fullReason
                        backup.sentSHA256 = sent
                        published[index].backup = backup
                        BackupMetrics.recordBackup(
                            store: metricsStore, destination: backup.destination, size: backup.size,
                            seconds: backup.archiveSeconds + backup.uploadSeconds, at: Date(), kind: backup.kind)
                        BackupMetrics.recordPoint(
                            store: metricsStore, destination: backup.destination, createdAt: backup.manifest.createdAt)
                    case .failure(let error):
                        published[index].error = StoreBackupError.wrapping(error)
                        if case StoreBackupError.chainBaseChanged = error {
                            chainFolder(for: destinations[index].displayName).remove()
                        }
                    }
                }
                if let cached, let chain, chain.isIncremental, let error = published[0].error, error.meansDestinationAway {
                    // Published nowhere (the point's only destination): it waits in the spool.
                    return [spool(archive, chain: chain, cached: cached, to: destinations[0], because: error, outcome: published[0])]
                }
                if let chain {
                    TestPausePoint.reach("chain-published")
                    saveChainState(chain, published: published.compactMap(\.backup))
                    TestPausePoint.reach("chain-saved")
                    if options.keepsPointCopies, reachable.count == 1, let backup = published[0].backup {
                        keepCopies(of: backup, held: heldCopy, in: chain.folder)
                    }
                }
                archive.throttle.report(BackupProgress(phase: .done, bytesDone: archive.size, bytesTotal: archive.size), force: true)
                return published
            }
        } catch {
            for index in outcomes.indices where !outcomes[index].succeeded && outcomes[index].error == nil {
                outcomes[index].error = StoreBackupError.wrapping(error)
            }
            recordFailures()
            throw error
        }
        recordFailures()
        return outcomes
    }

    /// The password for a new backup: nil unless ``CreateOptions/encrypt``.
    private func archivePassword() throws -> BackupPassword? {
        guard options.encrypt else { return nil }
        guard let passwords else { throw StoreBackupError.passwordUnavailable(reason: "encrypting a backup needs a password") }
        return try passwords.password()
    }

    /// The chain state folder of this store for `destination` (its display name).
    func chainFolder(for destination: String) -> ChainFolder {
        ChainFolder(storesDirectory: storesDirectory, destination: destination)
    }

    /// With ``CreateOptions/incremental``, the chain build for a backup published to
    /// `destinations` (the reachable ones; the first one's chain state decides, the others
    /// must hold the same). The base must be at each destination: listed now, checked
    /// against the state under the lock; any doubt makes a full backup.
    private func chainBuild(
        for destinations: [any BackupDestination], password: BackupPassword?, cached: CachedChain?
    )
        async -> ChainBuild?
    {
        guard let policy = options.incremental, let first = destinations.first else { return nil }
        var listed: [(folder: ChainFolder, listing: [BackupListing]?)] = []
        for target in destinations {
            let listing = destinations.count == 1 && cached != nil ? cached?.listing : try? await target.sortedBackups()
            listed.append((chainFolder(for: target.displayName), listing))
        }
        let build = ChainBuild(
            folder: chainFolder(for: first.displayName), policy: policy, password: password, listing: listed[0].listing,
            mirrors: Array(listed.dropFirst()), now: now())
        build.listedAt = cached?.listedAt ?? now()
        return build
    }

    /// The chain's backups as the state records them, when the one destination's next backup
    /// will be a point on a chain this host published (the policy calls for no full) and the
    /// destination was listed within ``CreateOptions/trustChainCacheFor``: create then neither
    /// lists the destination nor preflights it. The point's base (the chain's newest backup)
    /// is checked as the point is published, so a point never lands on a chain whose tip
    /// another host deleted (storebackup deletes a chain newest first); a link deleted in the
    /// middle by other means is seen at the next listing and by the restore drills.
    private func cachedChain(for destinations: [any BackupDestination]) -> CachedChain? {
        guard let policy = options.incremental, !policy.forceFull, destinations.count == 1, let trusted = options.trustChainCacheFor,
            let state = chainFolder(for: destinations[0].displayName).peek(), let links = state.links,
            links.last?.name == state.backupName, links.count == state.chainLength + 1,
            state.chainLength + 1 <= policy.maxChainLength, now().timeIntervalSince(state.fullCreatedAt) < policy.fullEvery,
            let listedAt = state.listedAt, now().timeIntervalSince(listedAt) < trusted
        else { return nil }
        return CachedChain(state: state, links: links, listedAt: listedAt)
    }

    /// The chain as its state records it when points wait in its spool (one destination),
    /// however long ago the destination was listed: they go out before anything else, or
    /// an outage longer than the cache's trust would strand them.
    private func spooledChain(for destinations: [any BackupDestination]) -> CachedChain? {
        guard destinations.count == 1, let state = chainFolder(for: destinations[0].displayName).peek(),
            state.spooled?.isEmpty == false, let links = state.links
        else { return nil }
        return CachedChain(state: state, links: links, listedAt: state.listedAt ?? .distantPast)
    }

    /// What the chain state knows of the destination (``cachedChain(for:)``).
    struct CachedChain {
        /// The chain's backups, full first, the spooled points included (the last ones).
        var listing: [BackupListing]
        var pointsUnlocked: Bool
        var listedAt: Date
        /// The points waiting in the spool, oldest first.
        var spooled: [PublishedLink]

        init(state: ChainState, links: [PublishedLink], listedAt: Date) {
            listing = links.map {
                BackupListing(name: $0.name, size: $0.size, date: BackupName.date(of: $0.name) ?? .distantPast, modified: nil)
            }
            pointsUnlocked = state.pointsUnlocked == true
            self.listedAt = listedAt
            spooled = state.spooled ?? []
        }
    }

    /// Keeps the local copies levels merge from (``CreateOptions/keepsPointCopies``): the
    /// point's archive (`held`, moved into place) and the backup's manifest. A copy that cannot
    /// be kept is only a cost: compaction then downloads it.
    private func keepCopies(of backup: BackupResult, held: String?, in folder: ChainFolder) {
        do {
            try folder.keepManifestCopy(try backup.manifest.encoded(), of: backup.name)
            if let held { try folder.keepPointCopy(held, as: backup.name) }
            folder.dropPointCopies(keeping: folder.peek()?.links?.map(\.name) ?? [])
        } catch {
            logger.warning(
                "could not keep a local copy of \(backup.name) (\(error)); merging its points will download it",
                metadata: ["store": "\(storesDirectory)"])
        }
    }

    /// Saves the chain state after a backup was published (at each destination it reached).
    /// A failure here does not undo the backup: the states are removed instead, so the next
    /// backup is a full one.
    private func saveChainState(_ build: ChainBuild, published: [BackupResult]) {
        guard let manifest = published.first?.manifest else { return }
        let folders = published.map { (folder: chainFolder(for: $0.destination), name: $0.name, size: $0.size) }
        do {
            try build.commit(manifest: manifest, published: folders, unlocked: published.first?.chainUnlocked)
        } catch {
            for folder in folders { folder.folder.remove() }
            logger.warning(
                "could not save the chain state (\(error)); the next backup will be a full one",
                metadata: ["store": "\(storesDirectory)"])
        }
    }
}
