import Foundation

/// How publishing one backup went at one of several destinations.
public struct PublishOutcome: Sendable {
    /// The destination's ``BackupDestination/displayName``.
    public var destination: String
    /// The backup as published there; nil when it failed there.
    public var backup: BackupResult?
    /// Why it failed there; nil when it succeeded.
    public var error: StoreBackupError?

    /// True when the backup was published at this destination.
    public var succeeded: Bool { backup != nil }
}

extension StoreHelper {
    /// Builds one backup and publishes it to ``destination`` and to each of `mirrors`
    /// (the 3-2-1 rule): the store is archived once (in a local folder destination when there
    /// is one, else in `TMPDIR`), and that file is uploaded to every destination at once
    /// (the one it was built in last, as it moves there by rename), each under the name of
    /// the archive's date where free there.
    ///
    /// A destination that fails (its preflight or its upload) does not stop the others;
    /// its outcome carries the error. Metrics are recorded per destination.
    ///
    /// - Returns: One outcome per destination, ``destination`` first, in order.
    /// - Throws: Only when nothing could be built (a locked store, no databases, a missing
    ///   password, cancellation): then nothing was published anywhere.
    public func createBackup(alsoTo mirrors: [any BackupDestination], progress: ProgressHandler? = nil) async throws -> [PublishOutcome] {
        let started = ContinuousClock.now
        let destinations: [any BackupDestination] = [destination] + mirrors
        var outcomes = destinations.map { PublishOutcome(destination: $0.displayName) }
        func recordFailures() {
            for outcome in outcomes where !outcome.succeeded {
                BackupMetrics.recordBackup(
                    store: metricsStoreName, destination: outcome.destination, size: nil,
                    seconds: Self.seconds(ContinuousClock.now - started), at: Date())
            }
        }
        do {
            let password = try archivePassword()
            var reachable: [Int] = []
            for (index, target) in destinations.enumerated() {
                do { try await target.preflight(); reachable.append(index) } catch {
                    outcomes[index].error = StoreBackupError.wrapping(error)
                }
            }
            guard !reachable.isEmpty else { recordFailures(); return outcomes }
            // Build in place at the first destination that can (a local folder: no space taken in
            // TMPDIR); it is published last, because publishing there moves the archive in by rename.
            var host: (index: Int, archivePath: String)?
            for index in reachable {
                // One that cannot take it (its folder cannot be created) fails at its upload instead.
                if let path = try? destinations[index].prepareInPlaceArchive() { host = (index, path); break }
            }
            if let host { reachable.removeAll { $0 == host.index }; reachable.append(host.index) }
            let archivePath =
                host?.archivePath
                ?? ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "archive", suffix: ".zip")
            let hostIndex = host?.index
            let order = reachable
            // Chains (``incremental``): an incremental only when every reachable destination holds the base.
            let chain = try await chainBuild(for: reachable.sorted().map { destinations[$0] }, password: password)
            defer { chain?.discard() }
            outcomes = try await withBuiltArchive(at: archivePath, password: password, progress: progress, chain: chain) { archive in
                let baseName = chain?.baseName
                var published = outcomes
                // Every destination but the in-place host at once; the host last, because
                // publishing there moves the archive away by rename.
                let others = order.filter { $0 != hostIndex }
                let shared = SharedUploadProgress(progress, uploads: order.count, size: archive.size)
                let results = try await withThrowingTaskGroup(of: (Int, Result<BackupResult, any Error>).self) { group in
                    for index in others {
                        let target = destinations[index]
                        group.addTask {
                            do {
                                return (
                                    index,
                                    .success(
                                        try await publish(
                                            archive, to: target, progress: shared.handler(for: index), baseName: baseName))
                                )
                            } catch StoreBackupError.cancelled {
                                throw StoreBackupError.cancelled
                            } catch {
                                return (index, .failure(error))
                            }
                        }
                    }
                    var results: [Int: Result<BackupResult, any Error>] = [:]
                    for try await (index, result) in group { results[index] = result }
                    return results
                }
                // The host takes the name the first destination took, so all share it where free.
                let start = others.lazy.compactMap { try? results[$0]?.get() }.first.flatMap { BackupName.date(of: $0.name) }
                var all = results
                if let index = hostIndex {
                    if Task.isCancelled { throw StoreBackupError.cancelled }
                    do {
                        all[index] = .success(
                            try await publish(
                                archive, to: destinations[index], progress: shared.handler(for: index), start: start,
                                baseName: baseName))
                    } catch StoreBackupError.cancelled {
                        throw StoreBackupError.cancelled
                    } catch {
                        all[index] = .failure(error)
                    }
                }
                for (index, result) in all {
                    switch result {
                    case .success(var backup):
                        backup.fullReason = chain?.fullReason
                        published[index].backup = backup
                        BackupMetrics.recordBackup(
                            store: metricsStoreName, destination: backup.destination, size: backup.size,
                            seconds: backup.archiveSeconds + backup.uploadSeconds, at: Date(), kind: backup.kind)
                    case .failure(let error):
                        published[index].error = StoreBackupError.wrapping(error)
                    }
                }
                if let chain { saveChainState(chain, published: published.compactMap(\.backup)) }
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
}

extension StoreHelper {
    /// With ``incremental``, the chain build for a backup published to `destinations` (the
    /// reachable ones; the first one's chain state decides, the others must hold the same).
    fileprivate func chainBuild(for destinations: [any BackupDestination], password: BackupPassword?) async throws -> ChainBuild? {
        guard let incremental, let first = destinations.first else { return nil }
        var listed: [(folder: ChainFolder, listing: [BackupListing]?)] = []
        for target in destinations {
            listed.append((chainFolder(for: target.displayName), try? await target.sortedBackups()))
        }
        return ChainBuild(
            folder: chainFolder(for: first.displayName), policy: incremental, password: password, listing: listed[0].listing,
            mirrors: Array(listed.dropFirst()), now: now())
    }
}

/// The upload progress of several destinations at once as one: bytes done summed over
/// them, out of the archive's size times their number.
private final class SharedUploadProgress: Sendable {
    private let progress: ProgressHandler?
    private let total: Int64
    private let done = Locked([Int: Int64]())

    init(_ progress: ProgressHandler?, uploads: Int, size: Int64) {
        self.progress = progress
        self.total = size * Int64(max(1, uploads))
    }

    func handler(for index: Int) -> ProgressHandler? {
        guard let progress else { return nil }
        return { [done, total] update in
            guard update.phase == .uploading else { return progress(update) }
            let sum = done.withLock { done -> Int64 in
                done[index] = update.bytesDone
                return done.values.reduce(0, +)
            }
            var merged = update
            merged.bytesDone = sum
            merged.bytesTotal = total
            progress(merged)
        }
    }
}
