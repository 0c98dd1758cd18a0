import Foundation
import Logging

extension BackupService {
    /// What compaction did before a scheduled run looked at the store.
    struct CompactionOutcome: Sendable {
        var merged: [String] = []
        var pruned: [String] = []
    }

    /// With levels (``StoreJob/levels``, one destination): merges the chain's ended hour and
    /// day (``PointCompaction``), then applies retention with the levels' rules, so the points
    /// whose level's span ended go. A failure is logged and leaves the chain as it was: the
    /// next run tries again, and the points keep restoring meanwhile.
    func compactPoints(_ job: StoreJob, log: Logger) async throws -> CompactionOutcome {
        var outcome = CompactionOutcome()
        guard let levels = job.levels, job.incremental != nil, job.mirrors.isEmpty else { return outcome }
        guard running.begin(job.name) else { throw StoreBackupError.backupAlreadyRunning(store: job.name) }
        defer { running.end(job.name) }
        let destination: any BackupDestination
        do {
            destination = try resolveDestination(job.destination, destinationOptions(logging: log))
        } catch {
            return outcome
        }
        do {
            let password = try job.passwordFile.map { try BackupPassword(contentsOfFile: $0) }
            var compaction = PointCompaction(
                storesDirectory: job.storesDirectory, destination: destination, password: password,
                compressionLevel: job.compressionLevel, logger: log, now: now(), metricsStore: job.name)
            compaction.levels = levels
            let merged = try await compaction.run()
            outcome.merged = merged.map(\.name)
            // Retention learns each backup's origin from this cache before it would download one.
            let origins = repository(of: job, at: destination).pruner(originCache: stateStore.directory).origins
            for point in merged { origins.record(name: point.name, size: point.size, manifest: point.manifest) }
        } catch {
            log.error("merging points failed; they stay as they are", metadata: ["error": "\(error)"])
            return outcome
        }
        guard var policy = job.appliedRetention, retentionDue(job, merged: !outcome.merged.isEmpty) else { return outcome }
        policy.levels = levels
        do {
            let started = now()
            _ = try? stateStore.update(job.name, default: initialState(job)) { $0.levelRetentionStarted = started }
            outcome.pruned = try await applyRetention(
                policy, job: job, at: repository(of: job, at: destination), host: FileSystem.hostName, log: log)
            _ = try? stateStore.update(job.name, default: initialState(job)) { $0.levelRetentionEnded = started }
            let listing = try await destination.listBackups()
            let levelsByName = PointLevels(BackupChains(listing))
            var counts = Dictionary(uniqueKeysWithValues: PointLevel.allCases.map { ($0.rawValue, 0) })
            for backup in listing { if let level = levelsByName.level(of: backup.name) { counts[level.rawValue, default: 0] += 1 } }
            BackupMetrics.recordPointsByLevel(store: job.name, destination: destination.displayName, counts: counts)
        } catch {
            log.error("retention after merging points failed", metadata: ["error": "\(error)"])
        }
        return outcome
    }

    /// Whether retention by level runs now: after a merge, when it was cut short (started
    /// after it last ended), or an hour after it last ended (points pass their span meanwhile).
    private func retentionDue(_ job: StoreJob, merged: Bool) -> Bool {
        if merged { return true }
        let state = stateStore.load(job.name)
        guard let ended = state?.levelRetentionEnded else { return true }
        if let started = state?.levelRetentionStarted, started > ended { return true }
        return now().timeIntervalSince(ended) >= 3_600
    }
}
