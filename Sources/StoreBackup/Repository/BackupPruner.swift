import Foundation

/// The backups of one origin and what a retention policy decides for each (see
/// ``BackupRepository/retentionPlan(_:host:storesDirectory:originCache:calendar:)``).
public struct RetentionGroup: Sendable {
    /// nil: backups whose origin could not be read; they are always kept.
    public var origin: BackupOrigin?
    /// Newest first.
    public var decisions: [RetentionPolicy.Decision]
    /// The backups the policy does not keep, newest first.
    public var toDelete: [BackupListing] { decisions.filter { !$0.keep }.map(\.backup) }
}

/// Applies a `RetentionPolicy` to a destination, separately for each origin (host and
/// stores directory), so one machine's or one store's backups never push out another's.
/// ``BackupRepository`` is its door.
struct BackupPruner: Sendable {
    typealias Group = RetentionGroup

    let destination: any BackupDestination
    let origins: BackupOriginIndex

    /// A pruner for one destination.
    ///
    /// - Parameters:
    ///   - destination: Where the backups are.
    ///   - stateDirectory: Where origins read from remote backups are cached; nil: no cache.
    ///   - passwords: Opens encrypted backups to learn their origin (see ``BackupOriginIndex``).
    init(destination: any BackupDestination, stateDirectory: String?, passwords: PasswordProvider? = nil) {
        self.destination = destination
        self.origins = BackupOriginIndex(destination: destination, cacheDirectory: stateDirectory, passwords: passwords)
    }

    /// Works out what to keep without deleting anything. `host` and `storesDirectory`
    /// narrow it to matching origins (nil: every origin).
    func plan(
        _ policy: RetentionPolicy, host: String?, storesDirectory: String?,
        calendar: Calendar = .current
    ) async throws -> [Group] {
        let backups = try await destination.listBackups()
        let originByName = await origins.origins(of: backups, download: true)
        var byOrigin: [BackupOrigin?: [BackupListing]] = [:]
        for backup in backups { byOrigin[originByName[backup.name] ?? nil, default: []].append(backup) }
        var groups: [Group] = []
        for (origin, members) in byOrigin {
            guard let origin else {
                if host == nil && storesDirectory == nil {
                    let kept = members.sorted { ($0.date, $0.name) > ($1.date, $1.name) }
                        .map { RetentionPolicy.Decision(backup: $0, reasons: ["origin unknown (no readable manifest)"]) }
                    groups.append(Group(origin: nil, decisions: kept))
                }
                continue
            }
            if let host, origin.host != host { continue }
            if let storesDirectory, origin.storesDirectory != FileSystem.absolutePath(storesDirectory) { continue }
            groups.append(Group(origin: origin, decisions: policy.apply(to: members, calendar: calendar)))
        }
        let sorted = groups.sorted { ($0.origin?.description ?? "~") < ($1.origin?.description ?? "~") }
        return Self.keepingChains(sorted, chains: BackupChains(backups))
    }

    /// Keeps every backup that a kept backup needs (its chain down to the full), whatever
    /// the policy said, with the reason "base of <the kept backup that needs it>". The
    /// policy's own decisions are left as they were, so retention stays restic's. Backups
    /// outside `groups` (other hosts, not planned) are kept, and so are their chains.
    static func keepingChains(_ groups: [Group], chains: BackupChains) -> [Group] {
        var doomed = Set(groups.flatMap { $0.toDelete.map(\.name) })
        guard !doomed.isEmpty else { return groups }
        var reasons: [String: String] = [:]
        // Newest first: every base is older than what depends on it, so a base kept here is
        // itself looked at later, and its own base kept in turn.
        for backup in chains.backups where !doomed.contains(backup.name) {
            for base in chains.bases(of: backup.name) where doomed.contains(base) {
                doomed.remove(base)
                reasons[base] = "base of \(backup.name)"
            }
        }
        return groups.map { group in
            var group = group
            for index in group.decisions.indices {
                if let reason = reasons[group.decisions[index].backup.name] { group.decisions[index].reasons = [reason] }
            }
            return group
        }
    }

    /// Deletes what a plan does not keep, newest first; returns the deleted names. Stops at
    /// the first failure, except a backup S3 Object Lock keeps: that one is kept and handed
    /// to `locked`, and the backups its chain needs are kept too and handed to `keptAsBase`
    /// (with the dependent that needs each), so no incremental is left without its base.
    /// Where the destination deletes in batches (``BackupDestination/deleteBatch(_:)``), see
    /// ``executeInBatches(_:chains:keptAsBase:)``.
    func execute(
        _ groups: [Group], locked: (@Sendable (_ name: String, _ until: Date?) -> Void)? = nil,
        keptAsBase: (@Sendable (_ name: String, _ dependent: String) -> Void)? = nil
    ) async throws -> [String] {
        let chains = BackupChains(groups.flatMap { $0.decisions.map(\.backup) })
        let toDelete = Set(groups.flatMap(\.toDelete).map(\.name))
        // Newest first, every incremental before its bases.
        let doomed = chains.backups.filter { toDelete.contains($0.name) }
        if doomed.count > 1, let deleted = try await executeInBatches(doomed.map(\.name), chains: chains, keptAsBase: keptAsBase) {
            return deleted
        }
        var deleted: Set<String> = []
        var order: [String] = []
        for backup in doomed {
            if Task.isCancelled { throw StoreBackupError.cancelled }
            // A dependent still there (locked, or kept for a locked one) needs this backup;
            // newest first, every dependent was tried before it.
            if let dependent = chains.directDependents(of: backup.name).first(where: { !deleted.contains($0) }) {
                keptAsBase?(backup.name, dependent)
                continue
            }
            do {
                try await destination.delete(backup.name)
            } catch StoreBackupError.backupNotFound {
                // Someone else removed it meanwhile: the outcome we wanted.
            } catch StoreBackupError.backupLocked(let name, _, let until) {
                // S3 Object Lock keeps it: kept, and said so; the rest of the prune goes on.
                locked?(name, until)
                continue
            }
            deleted.insert(backup.name)
            order.append(backup.name)
            TestPausePoint.reach("retention-deleted")
            BackupMetrics.recordRetention(destination: destination.displayName, removed: 1)
        }
        return order
    }

    /// Deletes `doomed` (newest first) in the destination's batches, each backup only if
    /// every backup that depends on it goes too; nil, having deleted nothing, where the
    /// destination deletes one by one. A batch has no order on the server, so a backup it
    /// failed to delete may have lost its base in the same batch: each is deleted again on its
    /// own (retried), and one that still stays fails the run, naming it (it is still doomed,
    /// and the next retention deletes it).
    private func executeInBatches(
        _ doomed: [String], chains: BackupChains, keptAsBase: (@Sendable (_ name: String, _ dependent: String) -> Void)?
    ) async throws -> [String]? {
        var deletable: [String] = []
        var going: Set<String> = []
        for name in doomed {
            if let dependent = chains.directDependents(of: name).first(where: { !going.contains($0) }) {
                keptAsBase?(name, dependent)
                continue
            }
            deletable.append(name)
            going.insert(name)
        }
        if deletable.isEmpty { return [] }
        if Task.isCancelled { throw StoreBackupError.cancelled }
        guard let failures = try await destination.deleteBatch(deletable) else { return nil }
        var stayed: [String] = []
        for name in deletable where failures[name] != nil {
            do {
                try await destination.delete(name)
            } catch StoreBackupError.backupNotFound {
                // Gone after all.
            } catch {
                stayed.append("\(name) (\(failures[name] ?? ""); then \(error))")
            }
        }
        TestPausePoint.reach("retention-deleted")
        let deleted = deletable.count - stayed.count
        BackupMetrics.recordRetention(destination: destination.displayName, removed: deleted)
        guard stayed.isEmpty else {
            throw StoreBackupError.destination(
                destination: destination.displayName,
                reason: "retention deleted \(deleted) backups but could not delete \(stayed.joined(separator: ", "))")
        }
        return deletable
    }
}
