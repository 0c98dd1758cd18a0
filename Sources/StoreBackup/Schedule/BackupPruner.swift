import Foundation

/// Applies a `RetentionPolicy` to a destination, separately for each origin (host and
/// stores directory), so one machine's or one store's backups never push out another's.
public struct BackupPruner: Sendable {
    public let destination: any BackupDestination
    public let origins: BackupOriginIndex

    /// A pruner for one destination.
    ///
    /// - Parameters:
    ///   - destination: Where the backups are.
    ///   - stateDirectory: Where origins read from remote backups are cached; nil: no cache.
    ///   - passwords: Opens encrypted backups to learn their origin (see ``BackupOriginIndex``).
    public init(destination: any BackupDestination, stateDirectory: String?, passwords: PasswordProvider? = nil) {
        self.destination = destination
        self.origins = BackupOriginIndex(destination: destination, cacheDirectory: stateDirectory, passwords: passwords)
    }

    /// The backups of one origin and what the policy decides for each.
    public struct Group: Sendable {
        /// nil: backups whose origin could not be read; they are always kept.
        public var origin: BackupOrigin?
        /// Newest first.
        public var decisions: [RetentionPolicy.Decision]
        public var toDelete: [BackupListing] { decisions.filter { !$0.keep }.map(\.backup) }
    }

    /// Works out what to keep without deleting anything. `host` and `storesDirectory`
    /// narrow it to matching origins (nil: every origin).
    public func plan(
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
        return groups.sorted { ($0.origin?.description ?? "~") < ($1.origin?.description ?? "~") }
    }

    /// Deletes what a plan does not keep; returns the deleted names. Stops at the first failure,
    /// except a backup S3 Object Lock keeps: that one is kept and handed to `locked`.
    public func execute(_ groups: [Group], locked: (@Sendable (_ name: String, _ until: Date?) -> Void)? = nil) async throws -> [String] {
        var deleted: [String] = []
        for group in groups {
            for backup in group.toDelete {
                if Task.isCancelled { throw StoreBackupError.cancelled }
                do {
                    try await destination.delete(backup.name)
                } catch StoreBackupError.backupNotFound {
                    // Someone else removed it meanwhile: the outcome we wanted.
                } catch StoreBackupError.backupLocked(let name, _, let until) {
                    // S3 Object Lock keeps it: kept, and said so; the rest of the prune goes on.
                    locked?(name, until)
                    continue
                }
                deleted.append(backup.name)
                BackupMetrics.recordRetention(destination: destination.displayName, removed: 1)
            }
        }
        return deleted
    }
}
