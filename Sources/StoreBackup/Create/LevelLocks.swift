import Foundation

/// S3 Object Lock with levels (docs/levels.md): each backup is locked for its level's
/// lifetime, counted from the end of its hour (minute points) or its day (hourly and daily
/// points), so every point of one hour, and every hourly point of one day, shares its date.
/// A backup is locked at upload as any (`retain-days`), then extended to its level's date;
/// its chain is extended to at least that date, newest first, stopping at the first backup
/// already locked as long (its own chain was extended when it was): nothing kept ever
/// depends on a backup whose lock ends first.
enum LevelLocks {
    /// Until when a backup of `level` made at `date` stays locked.
    static func until(_ level: PointLevel, at date: Date, levels: PointLevelPolicy) -> Date {
        let hourEnd = Double(PointLevels.hour(of: date) + 1) * 3_600
        let dayEnd = Double(PointLevels.day(of: date) + 1) * 86_400
        let end = level == .minute ? hourEnd : dayEnd
        return Date(timeIntervalSince1970: end + levels.span(of: level))
    }

    /// Locks `name` at least until `until`, in its own mode, then its chain (`chain`, full
    /// first, without `name`). False, changing nothing, when `name` carries no lock (a bucket
    /// without Object Lock, any other destination).
    static func extend(_ name: String, until: Date, chain: [String], at destination: any BackupDestination) async throws -> Bool {
        guard let current = try await destination.retention(of: name) else { return false }
        let target = BackupRetention(mode: current.mode, until: max(current.until, until))
        if current.until < until { _ = try await destination.extendRetention(of: name, to: target) }
        for base in chain.reversed() where base != name {
            do {
                guard try await destination.extendRetention(of: base, to: target) else { break }
            } catch StoreBackupError.cancelled {
                throw StoreBackupError.cancelled
            } catch {
                throw StoreBackupError.destination(
                    destination: destination.displayName,
                    reason:
                        "\"\(name)\" is locked until \(UTCTimestamp.iso8601(target.until)), but the lock of its base \"\(base)\" could not be extended to match: \(StoreBackupError.wrapping(error).summary)"
                )
            }
        }
        return true
    }
}
