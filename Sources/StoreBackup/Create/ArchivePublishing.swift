import Foundation
import Logging

/// Publishes one built archive to its destinations: every destination but the one it was
/// built in at once, that one last (publishing there moves the archive in by rename), each
/// under `<UTC date> Stores.zip` where that name is free there.
struct ArchivePublishing: Sendable {
    let storesDirectory: String
    let logger: Logger
    /// An incremental's base, which its name carries; nil for a full backup.
    let baseName: String?
    /// The chain's backups at the destination as the chain state knows them (a point): used
    /// instead of listing it to name the new backup, and its base checked alone as it is
    /// published (``BackupDestination/publishPoint(file:as:onto:progress:)``).
    var knownBackups: [BackupListing]? = nil
    /// The chain's points carry no lock (known from its first): none is asked for.
    var pointsUnlocked = false
    /// The backup is the full that starts a chain: whether it carries a lock is asked once
    /// here, so that its points, locked or not alike, need not ask.
    var startsChain = false
    /// With levels: the date a point is locked until (``LevelLocks``), its chain with it.
    var levelLockUntil: Date? = nil

    /// Publishes `archive` to each of `destinations` (indices into `all`), the in-place host
    /// last. A destination's failure is its result; only cancellation throws.
    func publish(
        _ archive: BuiltArchive, to order: [Int], of all: [any BackupDestination], host: Int?, progress: ProgressHandler?
    ) async throws -> [Int: Result<BackupResult, any Error>] {
        let others = order.filter { $0 != host }
        let shared = SharedUploadProgress(progress, uploads: order.count, size: archive.size)
        var results = try await withThrowingTaskGroup(of: (Int, Result<BackupResult, any Error>).self) { group in
            for index in others {
                let target = all[index]
                group.addTask {
                    (index, try await outcome { try await publish(archive, to: target, progress: shared.handler(for: index)) })
                }
            }
            var results: [Int: Result<BackupResult, any Error>] = [:]
            for try await (index, result) in group { results[index] = result }
            return results
        }
        // The host takes the name the first destination took, so all share it where free.
        let start = others.lazy.compactMap { try? results[$0]?.get() }.first.flatMap { BackupName.date(of: $0.name) }
        if let host {
            if Task.isCancelled { throw StoreBackupError.cancelled }
            results[host] = try await outcome {
                try await publish(archive, to: all[host], progress: shared.handler(for: host), start: start)
            }
        }
        return results
    }

    /// A destination's result: its backup or its failure; cancellation is thrown.
    private func outcome(_ body: () async throws -> BackupResult) async throws -> Result<BackupResult, any Error> {
        do {
            return .success(try await body())
        } catch StoreBackupError.cancelled {
            throw StoreBackupError.cancelled
        } catch {
            return .failure(error)
        }
    }

    /// Uploads a built archive to `destination` as `<UTC date> Stores.zip`, the date chosen
    /// by ``BackupNameDate`` (from `start`, by default when the archive was built), moving the
    /// name on by a second while another store sharing the destination has taken it.
    func publish(
        _ archive: BuiltArchive, to destination: any BackupDestination, progress: ProgressHandler?, start: Date? = nil
    ) async throws -> BackupResult {
        let clock = ContinuousClock()
        let uploadStarted = clock.now
        let clockDate = start ?? archive.createdAt
        var choice: BackupNameDate.Choice
        if let knownBackups {
            choice = BackupNameDate.choose(clock: clockDate, existing: knownBackups.map(\.name), base: baseName)
        } else {
            choice = await BackupNameDate.choose(clock: clockDate, at: destination, base: baseName)
        }
        if let warning = choice.warning { logger.warning("\(warning)", metadata: ["store": "\(storesDirectory)"]) }
        let first = choice.date
        // An incremental's name says which backup it applies onto.
        func nameAt(_ date: Date) -> String {
            baseName.flatMap { BackupName.makeIncremental(for: date, base: $0) } ?? BackupName.make(for: date)
        }
        var name = nameAt(first)
        // The crash tests stop here with part of the archive sent (a remote upload; a local
        // folder's publish is a rename, which reports none). Without a test hook the handler
        // is the caller's, untouched.
        var sending = progress
        if TestHooks.pausePoint != nil {
            sending = { update in
                if update.phase == .uploading, update.bytesDone > 0, update.bytesDone < update.bytesTotal {
                    TestPausePoint.reach("uploading")
                }
                progress?(update)
            }
        }
        for attempt in 1...10 {
            do {
                try Task.checkCancellation()
                if let base = knownBackups?.first(where: { $0.name == baseName }) {
                    try await destination.publishPoint(file: archive.path, as: name, onto: base, progress: sending)
                } else {
                    try await destination.upload(file: archive.path, as: name, progress: sending)
                }
                break
            } catch StoreBackupError.backupExists where attempt < 10 {
                name = nameAt(first.addingTimeInterval(TimeInterval(attempt)))
            } catch is CancellationError {
                throw StoreBackupError.cancelled
            }
        }
        // S3 Object Lock: an incremental's chain stays locked as long as the incremental. A
        // chain whose full came without a lock is not asked again at every point (the same
        // bucket default and options lock a full and its points alike).
        var unlocked: Bool?
        if pointsUnlocked {
            unlocked = true
        } else if startsChain {
            // Not knowing only costs the first point a request: the full stands published.
            do { unlocked = try await destination.retention(of: name) == nil } catch { unlocked = nil }
        } else if BackupName.isIncremental(name), let levelLockUntil, let chain = knownBackups?.map(\.name) {
            unlocked = try await !LevelLocks.extend(name, until: levelLockUntil, chain: chain, at: destination)
        } else if BackupName.isIncremental(name) {
            unlocked = try await destination.retention(of: name) == nil
            if unlocked == false { try await destination.extendChainRetention(of: name) }
        }
        var result = BackupResult(
            name: name, size: archive.size, destination: destination.displayName, manifest: archive.manifest,
            archiveSeconds: archive.archiveSeconds, uploadSeconds: (clock.now - uploadStarted).inSeconds)
        result.nameWarning = choice.warning
        result.chainUnlocked = unlocked
        return result
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
