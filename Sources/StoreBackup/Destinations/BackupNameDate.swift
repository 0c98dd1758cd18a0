import Foundation

/// The date a new backup is named for, so that names never go back and never collide: the
/// later of the clock and one second after the newest backup at the destination, and for an
/// incremental always after its base. A newest backup named far ahead of the clock (another
/// host's clock, or this one stepped back) is not followed: names would drift ever further
/// from the time, so the clock names the backup, with a warning.
enum BackupNameDate {
    /// How far ahead of the clock a newest backup's name is still followed.
    static let maximumLead: TimeInterval = 3600

    struct Choice: Sendable, Equatable {
        var date: Date
        /// Set when the newest backup was too far ahead to follow.
        var warning: String?
    }

    /// - Parameters:
    ///   - clock: Now, by the helper's clock.
    ///   - existing: The names of the backups at the destination (empty when it cannot list).
    ///   - base: An incremental's base's name.
    static func choose(clock: Date, existing: [String], base: String?) -> Choice {
        var second = clock.timeIntervalSince1970.rounded(.down)
        var warning: String?
        let dated = existing.compactMap { name in BackupName.date(of: name).map { (name, $0.timeIntervalSince1970) } }
        if let newest = dated.max(by: { ($0.1, $0.0) < ($1.1, $1.0) }), newest.1 >= second {
            if newest.1 - second <= maximumLead {
                second = newest.1 + 1
            } else {
                warning =
                    "the newest backup at the destination, \"\(newest.0)\", is named more than \(DurationText.format(maximumLead)) ahead of this machine's clock; the new backup is named by the clock"
            }
        }
        if let base, let baseSecond = BackupName.date(of: base)?.timeIntervalSince1970, baseSecond >= second {
            second = baseSecond + 1
        }
        // Named by the clock among older backups (the newest too far ahead): a second no
        // backup has, so an incremental's base date names one backup.
        let taken = Set(existing.compactMap { BackupName.ownDateText(of: $0).flatMap(UTCTimestamp.parseCompact)?.timeIntervalSince1970 })
        while taken.contains(second) { second += 1 }
        return Choice(date: Date(timeIntervalSince1970: second), warning: warning)
    }

    /// ``choose(clock:existing:base:)`` with `destination`'s backups. Best effort: a
    /// destination that cannot list (write-only credentials) gets the clock's name.
    static func choose(clock: Date, at destination: any BackupDestination, base: String?) async -> Choice {
        let existing = (try? await destination.listBackups().map(\.name)) ?? []
        return choose(clock: clock, existing: existing, base: base)
    }

    /// Whether a base named `base` is too far ahead of `clock` for an incremental on it.
    static func isTooFarAhead(_ base: String, of clock: Date) -> Bool {
        guard let date = BackupName.date(of: base) else { return false }
        return date.timeIntervalSince(clock) > maximumLead
    }
}
