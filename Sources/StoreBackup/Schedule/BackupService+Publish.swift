import Foundation
import Logging

extension BackupService {
    /// One run of a store: the backup is built once and published to its destination and
    /// each mirror; one failing does not stop the others. It is verified once (when the job
    /// asks), then retention runs at each destination that took it. The run counts as failed
    /// (state, hooks, exit status) when any destination failed: with one destination, its
    /// error; with several, an error naming those destinations.
    func publish(_ job: StoreJob, outcome start: BackupRunOutcome, scheduled: Bool, log: Logger) async -> BackupRunOutcome {
        var outcome = start
        var resolved: [(index: Int, destination: any BackupDestination)] = []
        var published: [PublishOutcome] = job.allDestinations.map {
            PublishOutcome(
                destination: $0.map(RemoteURL.redacted) ?? DestinationResolver.defaultFolder(environment: destinationOptions.environment))
        }
        for (index, value) in job.allDestinations.enumerated() {
            do {
                let destination = try resolveDestination(value, destinationOptions(logging: log))
                resolved.append((index, destination))
                published[index].destination = destination.displayName
            } catch {
                published[index].error = StoreBackupError.wrapping(error)
                BackupMetrics.recordBackup(store: job.name, destination: published[index].destination, size: nil, seconds: 0, at: Date())
            }
        }
        if let first = resolved.first {
            let (helper, made) = makeHelper(for: job, destination: first.destination)
            var options = made
            options.skipsUnchangedPoint = scheduled && options.trustChainCacheFor != nil
            do {
                let results = try await helper.createBackup(options, alsoTo: resolved.dropFirst().map(\.destination))
                for (slot, result) in zip(resolved, results) { published[slot.index] = result }
            } catch {
                outcome.error = StoreBackupError.wrapping(error)  // nothing was built; every destination reports it
                for slot in resolved { published[slot.index].error = StoreBackupError.wrapping(error) }
            }
        }
        if let same = published.first?.unchangedSince, published.allSatisfy({ $0.unchangedSince != nil }) {
            log.debug("the store is as \(same) holds it; no point")
            outcome.unchangedSince = same
            return outcome
        }
        for slot in resolved {
            guard let backup = published[slot.index].backup else { continue }
            if outcome.backup == nil { outcome.backup = backup }
            log.info(
                "backup created", metadata: ["backup": "\(backup.name)", "size": "\(backup.size)", "destination": "\(backup.destination)"])
            repository(of: job, at: slot.destination).pruner(originCache: stateStore.directory).origins.record(
                name: backup.name, size: backup.size, manifest: backup.manifest)
        }
        // Checked once, where the copy is cheapest to read (a local folder: no download).
        let took = resolved.filter { published[$0.index].backup != nil }
        if job.verifyAfterCreate,
            let checked = took.first(where: { $0.destination.localPath(of: published[$0.index].backup!.name) != nil }) ?? took.first
        {
            do {
                let backup = published[checked.index].backup!
                // A point is checked against what was sent; its chain is the drills' to read.
                let check: StoreBackupError?
                if backup.kind == "incremental" && backup.sentSHA256 != nil {
                    check = try await verifyPointJustMade(job, backup: backup, at: checked.destination, log: log)
                } else {
                    check = try await verifyJustMade(job, backup: backup.name, at: checked.destination, log: log)
                }
                if let failure = check {
                    outcome.verificationFailed = true
                    outcome.error = failure
                }
            } catch {
                outcome.error = StoreBackupError.wrapping(error)
            }
        }
        // A backup that failed its check (or a cancelled check) must not push out a good older one.
        // In chains, retention runs after each full: a point frees nothing it could delete.
        let point = job.incremental != nil && outcome.backup?.kind == "incremental"
        if let policy = job.appliedRetention, outcome.error == nil, !point {
            for slot in took {
                let backup = published[slot.index].backup!
                do {
                    outcome.pruned += try await applyRetention(
                        policy, job: job, at: repository(of: job, at: slot.destination), host: backup.manifest.hostName, log: log)
                } catch {
                    outcome.retentionError = [outcome.retentionError, "\(backup.destination): \(error)"].compactMap { $0 }.joined(
                        separator: "; ")
                    log.error("retention failed", metadata: ["destination": "\(backup.destination)", "error": "\(error)"])
                }
            }
        }
        let failed = published.filter { !$0.succeeded }
        if published.count == 1 {
            if outcome.error == nil { outcome.error = failed.first?.error }
        } else {
            outcome.destinations = published
        }
        if outcome.error == nil, failed.count > 0, published.count > 1 {
            // Errors mostly begin with their destination's name already; say it once.
            let reasons = failed.map { failure -> String in
                let text = Self.describe(failure.error ?? StoreBackupError.cancelled)
                return text.hasPrefix(failure.destination + ": ") ? String(text.dropFirst(failure.destination.count + 2)) : text
            }
            outcome.error = StoreBackupError.destination(
                destination: failed.map(\.destination).joined(separator: ", "),
                reason:
                    "the backup was not published there (\(published.count - failed.count) of \(published.count) destinations took it): "
                    + reasons.joined(separator: "; "))
        }
        outcome.finishedAt = Date()
        record(outcome, job: job, log: log)
        let names = failed.isEmpty ? published.map(\.destination) : failed.map(\.destination)
        await runHooks(for: outcome, job: job, destination: names.joined(separator: ", "), log: log)
        return outcome
    }

    /// The store-free door on one of a job's destinations, with the job's password.
    func repository(of job: StoreJob, at destination: any BackupDestination) -> BackupRepository {
        BackupRepository(
            destination: destination, passwords: job.passwordFile.map(PasswordProvider.file), logger: logger.with(store: job.name))
    }
}
