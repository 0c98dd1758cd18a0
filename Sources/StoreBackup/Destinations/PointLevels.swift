import Foundation

/// How long each level of restore points is kept (docs/levels.md): every point for
/// ``minuteSpan``, the last of each hour for ``hourlySpan``, the last of each day (and every
/// full) for ``dailySpan``, all measured back from the newest backup.
public struct PointLevelPolicy: Sendable, Equatable, Codable {
    /// Every point is kept this long (`minute:`, 24 h by default).
    public var minuteSpan: TimeInterval = 86_400
    /// An hour's point is kept this long (`hourly:`, 7 days by default).
    public var hourlySpan: TimeInterval = 7 * 86_400
    /// A day's point, and a full, is kept this long (`daily:`, 35 days by default).
    public var dailySpan: TimeInterval = 35 * 86_400

    /// The default spans: a minute for a day, an hour for a week, a day for five weeks.
    public init(minuteSpan: TimeInterval = 86_400, hourlySpan: TimeInterval = 7 * 86_400, dailySpan: TimeInterval = 35 * 86_400) {
        self.minuteSpan = minuteSpan
        self.hourlySpan = hourlySpan
        self.dailySpan = dailySpan
    }

    /// How long a backup of `level` is kept: its level's span, or a lower level's when that
    /// is longer (a point never goes before the points of lower levels).
    public func span(of level: PointLevel) -> TimeInterval {
        switch level {
        case .minute: minuteSpan
        case .hourly: max(minuteSpan, hourlySpan)
        case .daily, .full: max(minuteSpan, hourlySpan, dailySpan)
        }
    }

    /// The most backups a point's chain holds with levels on (a full every `fullEvery`):
    /// the full, a daily for each further day, an hourly for each earlier hour of its day,
    /// and the points of its hour at one a minute.
    public static func chainBound(fullEvery: TimeInterval) -> Int {
        Int((fullEvery / 86_400).rounded(.up)) + 23 + 60
    }
}

/// A restore point's level, read from the names of its chain (``PointLevels``).
public enum PointLevel: String, Sendable, Codable, Comparable, CaseIterable {
    case minute, hourly, daily, full

    private var rank: Int { Self.allCases.firstIndex(of: self)! }
    /// Lower levels first: a minute point is below an hourly one, a full above all.
    public static func < (left: PointLevel, right: PointLevel) -> Bool { left.rank < right.rank }
}

/// The level of each backup at one destination, from the names alone (as `list` reads chains).
///
/// Compaction keeps the chain shaped so that levels can be read back: a day's points apply,
/// through the day's hourly heads, onto the previous day's head, and an hour's points onto
/// the previous hour's head. A point **heads its day** when it applies onto a full or onto a
/// point that heads an earlier day; it **heads its hour** when it heads its day or applies
/// onto a point that heads an earlier hour. The newest point that heads its day is the day's
/// `daily`; otherwise the newest that heads its hour is the hour's `hourly`; every other point
/// is a `minute` point. Days and hours are UTC, as names are.
public struct PointLevels: Sendable {
    private var levels: [String: PointLevel] = [:]

    /// The levels of the backups among `chains`.
    public init(_ chains: BackupChains) {
        var headsDay: [String: Bool] = [:]
        var headsHour: [String: Bool] = [:]
        var newestDayHead: [Int: (Date, String)] = [:]
        var newestHourHead: [Int: (Date, String)] = [:]
        // Oldest first: a base is decided before what applies onto it.
        for backup in chains.backups.reversed() {
            guard BackupName.isIncremental(backup.name) else {
                levels[backup.name] = .full
                headsDay[backup.name] = true
                headsHour[backup.name] = true
                continue
            }
            levels[backup.name] = .minute
            guard let base = chains.base(of: backup.name), let baseDate = BackupName.date(of: base) else { continue }
            let baseIsFull = !BackupName.isIncremental(base)
            let day = Self.day(of: backup.date)
            let hour = Self.hour(of: backup.date)
            let isDayHead = baseIsFull || (headsDay[base] == true && Self.day(of: baseDate) < day)
            let isHourHead = isDayHead || (headsHour[base] == true && Self.hour(of: baseDate) < hour)
            headsDay[backup.name] = isDayHead
            headsHour[backup.name] = isHourHead
            if isDayHead, (newestDayHead[day]?.0 ?? .distantPast) <= backup.date { newestDayHead[day] = (backup.date, backup.name) }
            if isHourHead, (newestHourHead[hour]?.0 ?? .distantPast) <= backup.date { newestHourHead[hour] = (backup.date, backup.name) }
        }
        for (_, head) in newestHourHead { levels[head.1] = .hourly }
        for (_, head) in newestDayHead { levels[head.1] = .daily }
    }

    /// The level of backup `name`; nil when it is not among the chains read.
    public func level(of name: String) -> PointLevel? { levels[name] }

    /// The UTC day (days since 1970) a date falls in.
    static func day(of date: Date) -> Int { Int((date.timeIntervalSince1970 / 86_400).rounded(.down)) }

    /// The UTC hour (hours since 1970) a date falls in.
    static func hour(of date: Date) -> Int { Int((date.timeIntervalSince1970 / 3_600).rounded(.down)) }
}
