import Foundation

/// Which backups to keep, with restic's `forget` semantics.
///
/// Backups are taken newest first. `keepLast` keeps the n newest. Each of `keepHourly`,
/// `keepDaily`, `keepWeekly` (ISO weeks), `keepMonthly` and `keepYearly` keeps the newest
/// backup of each of the n most recent hours/days/… that have a backup at all (periods
/// without one are not counted). `keepWithin` keeps every backup newer than that span
/// before the *newest backup* (not before now, so a machine that stopped backing up keeps
/// its last ones). A backup kept by several rules counts against each of them. Periods are
/// read in `calendar`'s time zone (local time by default). The newest backup is always kept.
public struct RetentionPolicy: Sendable, Equatable, Codable {
    /// Keeps this many of the newest backups (`keep-last`); 0: this rule keeps none.
    public var keepLast = 0
    /// Keeps the newest backup of each of this many latest hours that have a backup
    /// (`keep-hourly`); 0: this rule keeps none.
    public var keepHourly = 0
    /// Keeps the newest backup of each of this many latest calendar days that have a backup
    /// (`keep-daily`); 0: this rule keeps none.
    public var keepDaily = 0
    /// Keeps the newest backup of each of this many latest ISO weeks (Monday to Sunday) that
    /// have a backup (`keep-weekly`); 0: this rule keeps none.
    public var keepWeekly = 0
    /// Keeps the newest backup of each of this many latest calendar months that have a backup
    /// (`keep-monthly`); 0: this rule keeps none.
    public var keepMonthly = 0
    /// Keeps the newest backup of each of this many latest calendar years that have a backup
    /// (`keep-yearly`); 0: this rule keeps none.
    public var keepYearly = 0
    /// Keeps every backup made less than this span before the newest backup (`keep-within`);
    /// nil: no such rule.
    public var keepWithin: RetentionSpan?
    /// Levels of restore points (docs/levels.md): every point within the minute span of the
    /// newest backup, each hour's within the hourly span, each day's and every full within
    /// the daily span; nil: no such rule.
    public var levels: PointLevelPolicy?

    /// A policy with the rules given; every other rule keeps nothing. A policy with no rule at
    /// all is ``isEmpty``.
    public init(
        keepLast: Int = 0, keepHourly: Int = 0, keepDaily: Int = 0, keepWeekly: Int = 0,
        keepMonthly: Int = 0, keepYearly: Int = 0, keepWithin: RetentionSpan? = nil
    ) {
        self.keepLast = keepLast
        self.keepHourly = keepHourly
        self.keepDaily = keepDaily
        self.keepWeekly = keepWeekly
        self.keepMonthly = keepMonthly
        self.keepYearly = keepYearly
        self.keepWithin = keepWithin
    }

    /// No rule given: such a policy would delete everything but the newest, so callers refuse it.
    public var isEmpty: Bool {
        keepLast == 0 && keepHourly == 0 && keepDaily == 0 && keepWeekly == 0
            && keepMonthly == 0 && keepYearly == 0 && keepWithin == nil && levels == nil
    }

    /// The configuration and command-line spelling, e.g. "keep-daily 7, keep-weekly 4".
    public var summary: String {
        var parts: [String] = []
        for (name, value) in [
            ("keep-last", keepLast), ("keep-hourly", keepHourly), ("keep-daily", keepDaily),
            ("keep-weekly", keepWeekly), ("keep-monthly", keepMonthly), ("keep-yearly", keepYearly),
        ]
        where value > 0 { parts.append("\(name) \(value)") }
        if let keepWithin { parts.append("keep-within \(keepWithin)") }
        if let levels {
            parts.append(
                "levels (minute \(DurationText.format(levels.minuteSpan)), hourly \(DurationText.format(levels.hourlySpan)), daily \(DurationText.format(levels.dailySpan)))"
            )
        }
        return parts.isEmpty ? "(none)" : parts.joined(separator: ", ")
    }

    /// One backup's fate and the rules that keep it.
    public struct Decision: Sendable, Equatable {
        /// The backup this decision is about.
        public var backup: BackupListing
        /// Empty: the backup is to be deleted. Otherwise e.g. ["daily snapshot", "weekly snapshot"].
        public var reasons: [String]
        /// Whether the backup stays: true when at least one rule keeps it.
        public var keep: Bool { !reasons.isEmpty }
    }

    /// Applies the policy to one group of backups (one store of one host). Returns one
    /// decision per backup, newest first (by date, every incremental before its bases:
    /// ``BackupChains/newestFirst(_:)``, so a chain an earlier version named out of order
    /// keeps its real newest).
    public func apply(to backups: [BackupListing], calendar: Calendar = .current) -> [Decision] {
        let sorted = BackupChains.newestFirst(backups)
        guard let newest = sorted.first else { return [] }
        var iso = Calendar(identifier: .iso8601)
        iso.timeZone = calendar.timeZone

        // One bucket per rule: a backup is kept when its period differs from the last kept one's.
        struct Bucket {
            var remaining: Int
            var last: String?
            let reason: String
            let period: (Date, Int) -> String
        }
        func key(_ date: Date, _ components: Set<Calendar.Component>) -> String {
            let parts = calendar.dateComponents(components, from: date)
            return [parts.year, parts.month, parts.day, parts.hour].compactMap { $0 }.map(String.init).joined(separator: "-")
        }
        var buckets = [
            Bucket(remaining: keepLast, reason: "last snapshot") { _, index in String(index) },
            Bucket(remaining: keepHourly, reason: "hourly snapshot") { date, _ in key(date, [.year, .month, .day, .hour]) },
            Bucket(remaining: keepDaily, reason: "daily snapshot") { date, _ in key(date, [.year, .month, .day]) },
            Bucket(remaining: keepWeekly, reason: "weekly snapshot") { date, _ in
                let parts = iso.dateComponents([.yearForWeekOfYear, .weekOfYear], from: date)
                return "\(parts.yearForWeekOfYear!)-W\(parts.weekOfYear!)"
            },
            Bucket(remaining: keepMonthly, reason: "monthly snapshot") { date, _ in key(date, [.year, .month]) },
            Bucket(remaining: keepYearly, reason: "yearly snapshot") { date, _ in key(date, [.year]) },
        ]
        let withinLimit = keepWithin.map { $0.subtracted(from: newest.date, calendar: calendar) }
        let levelOf = levels.map { _ in PointLevels(BackupChains(backups)) }

        var decisions: [Decision] = []
        for (index, backup) in sorted.enumerated() {
            var reasons: [String] = []
            if let withinLimit, backup.date > withinLimit, let keepWithin {
                reasons.append("within \(keepWithin)")
            }
            if let levels, let level = levelOf?.level(of: backup.name),
                newest.date.timeIntervalSince(backup.date) < levels.span(of: level)
            {
                reasons.append("\(level.rawValue) point within \(DurationText.format(levels.span(of: level)))")
            }
            for slot in buckets.indices where buckets[slot].remaining > 0 {
                let period = buckets[slot].period(backup.date, index)
                if period != buckets[slot].last {
                    buckets[slot].last = period
                    buckets[slot].remaining -= 1
                    reasons.append(buckets[slot].reason)
                }
            }
            // Whatever the rules say, the newest backup stays: a policy must never leave nothing.
            if index == 0 && reasons.isEmpty { reasons.append("newest backup") }
            decisions.append(Decision(backup: backup, reasons: reasons))
        }
        return decisions
    }
}

/// restic's `--keep-within` span: years, months, days and hours, written like `1y5m7d2h`
/// (`m` is months here, as in restic).
public struct RetentionSpan: Sendable, Equatable, Codable, CustomStringConvertible {
    public var years = 0, months = 0, days = 0, hours = 0

    /// A span of so many years, months, days and hours, added together.
    public init(years: Int = 0, months: Int = 0, days: Int = 0, hours: Int = 0) {
        self.years = years; self.months = months; self.days = days; self.hours = hours
    }

    /// Reads restic's form, e.g. `1y5m7d2h`, `30d`, `12h` (`m` is months); throws
    /// `invalidSchedule` for anything else, and for a span of zero.
    public static func parse(_ text: String) throws -> RetentionSpan {
        var span = RetentionSpan()
        var number = ""
        var sawUnit = false
        for character in text.trimmingCharacters(in: .whitespaces).lowercased() {
            if character.isNumber { number.append(character); continue }
            guard let value = Int(number) else { throw Self.invalid(text) }
            switch character {
            case "y": span.years += value
            case "m": span.months += value
            case "d": span.days += value
            case "h": span.hours += value
            default: throw Self.invalid(text)
            }
            number = ""
            sawUnit = true
        }
        guard number.isEmpty, sawUnit, span != RetentionSpan() else { throw Self.invalid(text) }
        return span
    }

    private static func invalid(_ text: String) -> StoreBackupError {
        .invalidSchedule(
            reason: "\"\(text)\" is not a keep-within span; use years, months, days and hours like restic: 1y5m7d2h, 30d, 12h (m is months)"
        )
    }

    /// The span in restic's form, e.g. `1y6m`, as ``parse(_:)`` reads it.
    public var description: String {
        var text = ""
        for (value, unit) in [(years, "y"), (months, "m"), (days, "d"), (hours, "h")] where value > 0 {
            text += "\(value)\(unit)"
        }
        return text
    }

    /// `date` minus this span, month and year arithmetic by the calendar (as restic's AddDate).
    func subtracted(from date: Date, calendar: Calendar) -> Date {
        let shifted = calendar.date(byAdding: DateComponents(year: -years, month: -months, day: -days), to: date) ?? date
        return shifted.addingTimeInterval(TimeInterval(-hours * 3600))
    }
}
