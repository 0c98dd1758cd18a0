import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The scheduler's points while their destination cannot be reached: kept in the spool
/// (``ChainFolder/spool(file:as:)``, at most ``IncrementalPolicy/spoolLimit`` bytes) and sent,
/// oldest first, at the next run that reaches it. Only points on a chain this host published
/// to one destination without Object Lock are spooled (a locked chain's points extend their
/// bases' locks as they are published).
extension CreatePipeline {
    /// Sends the spooled points of `cached` to `destination`, oldest first, each onto the link
    /// before it. Returns the failure that shows the destination is still away (the points
    /// from that one on keep waiting); any other failure drops the chain state and the spool
    /// with it (the next backup is a full one, which holds every change they held).
    func drainSpool(_ cached: CachedChain, to destination: any BackupDestination) async throws -> StoreBackupError? {
        let folder = chainFolder(for: destination.displayName)
        for link in cached.spooled {
            guard let index = cached.listing.firstIndex(where: { $0.name == link.name }), index > 0 else {
                folder.remove()
                return nil
            }
            do {
                try await destination.publishPoint(
                    file: folder.spoolPath(of: link.name), as: link.name, onto: cached.listing[index - 1], progress: nil)
                try folder.unspool(link.name)
                BackupMetrics.recordPoint(
                    store: metricsStore, destination: destination.displayName,
                    createdAt: BackupName.date(of: link.name) ?? now())
                logger.info("a spooled point reached the destination", metadata: ["backup": "\(link.name)"])
            } catch StoreBackupError.cancelled {
                throw StoreBackupError.cancelled
            } catch let error as StoreBackupError where error.meansDestinationAway {
                return error
            } catch {
                logger.warning(
                    "spooled point \(link.name) cannot be published (\(error)); the next backup will be a full one",
                    metadata: ["store": "\(storesDirectory)"])
                folder.remove()
                return nil
            }
        }
        return nil
    }

    /// Keeps the point `archive` (on `cached`'s chain) in the spool when there is room, and
    /// saves the chain state with it as the chain's newest link; `outcome` (whose error is
    /// `error`) then names it. Without room, nothing is kept: the next point holds its changes.
    func spool(
        _ archive: BuiltArchive, chain: ChainBuild, cached: CachedChain, to destination: any BackupDestination,
        because error: StoreBackupError, outcome: PublishOutcome
    ) -> PublishOutcome {
        var outcome = outcome
        outcome.error = error
        let folder = chainFolder(for: destination.displayName)
        let waiting = cached.spooled.reduce(Int64(0)) { $0 + $1.size }
        let limit = options.incremental?.spoolLimit ?? 0
        guard cached.pointsUnlocked, let base = chain.baseName, waiting + archive.size <= limit else {
            logger.warning(
                "\(destination.displayName) cannot be reached and the point cannot wait in the spool (\(cached.spooled.count) points, \(waiting) bytes waiting): the next point will hold its changes",
                metadata: ["store": "\(storesDirectory)"])
            return outcome
        }
        let date = BackupNameDate.choose(clock: archive.createdAt, existing: cached.listing.map(\.name), base: base).date
        guard let name = BackupName.makeIncremental(for: date, base: base) else { return outcome }
        do {
            try folder.spool(file: archive.path, as: name)
            try chain.commit(
                manifest: archive.manifest, published: [(folder, name, archive.size)], unlocked: true, spooled: true)
            outcome.spooled = name
            logger.warning(
                "\(destination.displayName) cannot be reached: point \(name) waits in the spool (\(cached.spooled.count + 1) points)",
                metadata: ["store": "\(storesDirectory)"])
        } catch {
            unlink(folder.spoolPath(of: name))
            logger.warning("the point cannot be spooled (\(error))", metadata: ["store": "\(storesDirectory)"])
        }
        return outcome
    }
}

extension StoreBackupError {
    /// A failure that says the destination cannot be reached now (a connection, a timeout, a
    /// busy or failing server, after the retries), not that the request itself is wrong.
    var meansDestinationAway: Bool {
        if case .transfer(let failure) = self { return failure.isRetryable }
        return false
    }
}
