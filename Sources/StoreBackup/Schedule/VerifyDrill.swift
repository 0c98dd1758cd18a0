import Foundation

/// A restore drill: on a schedule of its own, the service verifies backups of a store the
/// way a restore would check them (every CRC, every file against its manifest SHA-256,
/// `PRAGMA integrity_check` on each database), so a backup that stopped being restorable is
/// found on a quiet night rather than on the day it is needed.
///
/// Written in the configuration as `verify: {schedule: "30 4 * * *", pick: rotate}`
/// (and `destinations: all` to drill every copy of a store with several destinations).
public struct VerifyDrill: Sendable, Equatable {
    /// Which backups one drill verifies.
    public enum Pick: Sendable, Equatable, CustomStringConvertible {
        /// The newest backup, every time (the default: it is the one a restore would take).
        case newest
        /// One backup a night in turn, oldest to newest and round again, chosen by the date
        /// of the drill: over as many nights as there are backups, each is verified once.
        case rotate
        /// Every backup made within this many seconds before the drill (at least the newest).
        case allWithin(seconds: TimeInterval)

        /// `newest`, `rotate`, or `all-within 7d`.
        public static func parse(_ text: String) throws -> Pick {
            let words = text.split(separator: " ", omittingEmptySubsequences: true).map { $0.lowercased() }
            switch words.first {
            case "newest" where words.count == 1: return .newest
            case "rotate" where words.count == 1: return .rotate
            case "all-within" where words.count == 2: return .allWithin(seconds: try DurationText.parseSeconds(words[1]))
            default:
                throw StoreBackupError.invalidSchedule(
                    reason: "\"\(text)\" is not a pick; use newest, rotate, or all-within <span> (e.g. all-within 7d)")
            }
        }

        /// The configuration's spelling, e.g. `all-within 7d`, as ``parse(_:)`` reads it.
        public var description: String {
            switch self {
            case .newest: return "newest"
            case .rotate: return "rotate"
            case .allWithin(let seconds): return "all-within \(DurationText.format(seconds))"
            }
        }
    }

    /// When drills run (the same forms as a backup's schedule).
    public var schedule: Schedule
    /// Which backups each drill verifies (`pick:`); the newest by default.
    public var pick: Pick
    /// Drill at every destination of the store (`destinations: all`), each copy on its own,
    /// instead of the first only (the default: a remote drill downloads what it verifies).
    public var everyDestination = false

    /// Drills on `schedule` that verify the backups `pick` chooses, at the store's first
    /// destination only unless `everyDestination`.
    public init(schedule: Schedule, pick: Pick = .newest, everyDestination: Bool = false) {
        self.schedule = schedule
        self.pick = pick
        self.everyDestination = everyDestination
    }

    /// The backups a drill at `date` verifies, newest first. `backups` is the destination's
    /// listing (any order). Rotation counts calendar days since 1970 in `calendar`'s time
    /// zone, so two drills on one day verify the same backup and consecutive days walk
    /// through the list without any state to keep.
    public func select(from backups: [BackupListing], at date: Date, calendar: Calendar = .current) -> [BackupListing] {
        let newestFirst = backups.sorted { $0.date != $1.date ? $0.date > $1.date : $0.name > $1.name }
        guard let newest = newestFirst.first else { return [] }
        switch pick {
        case .newest:
            return [newest]
        case .rotate:
            let oldestFirst = Array(newestFirst.reversed())
            let day = Self.dayNumber(of: date, calendar: calendar)
            return [oldestFirst[day % oldestFirst.count]]
        case .allWithin(let seconds):
            let since = date.addingTimeInterval(-seconds)
            let recent = newestFirst.filter { $0.date >= since }
            return recent.isEmpty ? [newest] : recent
        }
    }

    /// Whole days from 1970-01-01 to `date`'s calendar day (never negative).
    static func dayNumber(of date: Date, calendar: Calendar) -> Int {
        let epoch = calendar.startOfDay(for: Date(timeIntervalSince1970: 0))
        let days = calendar.dateComponents([.day], from: epoch, to: calendar.startOfDay(for: date)).day ?? 0
        return max(0, days)
    }
}
