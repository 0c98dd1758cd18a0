import Foundation

/// A classic 5-field cron expression: minute, hour, day of month, month, day of week.
///
/// Each field takes `*`, numbers, ranges `a-b`, lists `a,b`, steps `*/n` and `a-b/n`;
/// months and weekdays also take names (`jan`, `mon`); weekday 0 and 7 are Sunday.
/// As in Vixie cron, when both day of month and day of week are restricted, a day
/// matching either fires.
public struct CronExpression: Sendable, Equatable {
    /// The expression as given, its fields separated by single spaces.
    public let text: String
    let minutes: Set<Int>
    let hours: Set<Int>
    let daysOfMonth: Set<Int>
    let months: Set<Int>
    /// 0 = Sunday … 6 = Saturday.
    let daysOfWeek: Set<Int>
    let dayOfMonthRestricted: Bool
    let dayOfWeekRestricted: Bool

    /// Parses the five fields of `text`; throws `invalidSchedule` saying which field is wrong.
    public init(_ text: String) throws {
        let fields = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        guard fields.count == 5 else {
            throw StoreBackupError.invalidSchedule(
                reason: "a cron expression has 5 fields (minute hour day-of-month month day-of-week); \"\(text)\" has \(fields.count)")
        }
        self.text = fields.joined(separator: " ")
        minutes = try Self.field(fields[0], name: "minute", range: 0...59)
        hours = try Self.field(fields[1], name: "hour", range: 0...23)
        daysOfMonth = try Self.field(fields[2], name: "day of month", range: 1...31)
        months = try Self.field(fields[3], name: "month", range: 1...12, names: Self.monthNames)
        let weekdays = try Self.field(fields[4], name: "day of week", range: 0...7, names: Self.dayNames)
        daysOfWeek = Set(weekdays.map { $0 % 7 })
        dayOfMonthRestricted = !fields[2].hasPrefix("*")
        dayOfWeekRestricted = !fields[4].hasPrefix("*")
    }

    static let monthNames = [
        "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
        "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
    ]
    static let dayNames = ["sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6]

    private static func field(_ text: String, name: String, range: ClosedRange<Int>, names: [String: Int] = [:]) throws -> Set<Int> {
        func value(_ token: String) throws -> Int {
            if let number = Int(token), range.contains(number) { return number }
            if let named = names[token.lowercased()] { return named }
            throw StoreBackupError.invalidSchedule(
                reason: "cron \(name) field: \"\(token)\" is not in \(range.lowerBound)-\(range.upperBound)")
        }
        var result = Set<Int>()
        for part in text.split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
            let pieces = part.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard pieces.count <= 2, !pieces[0].isEmpty else {
                throw StoreBackupError.invalidSchedule(reason: "cron \(name) field: \"\(part)\" is malformed")
            }
            var step = 1
            if pieces.count == 2 {
                guard let parsed = Int(pieces[1]), parsed > 0 else {
                    throw StoreBackupError.invalidSchedule(reason: "cron \(name) field: step \"\(pieces[1])\" must be a positive number")
                }
                step = parsed
            }
            let bounds: ClosedRange<Int>
            if pieces[0] == "*" {
                bounds = range
            } else if let dash = pieces[0].firstIndex(of: "-") {
                let low = try value(String(pieces[0][..<dash]))
                let high = try value(String(pieces[0][pieces[0].index(after: dash)...]))
                guard low <= high else {
                    throw StoreBackupError.invalidSchedule(reason: "cron \(name) field: range \"\(pieces[0])\" runs backwards")
                }
                bounds = low...high
            } else {
                let single = try value(pieces[0])
                // "5/15" means from 5 to the end of the range in steps of 15.
                bounds = pieces.count == 2 ? single...range.upperBound : single...single
            }
            result.formUnion(stride(from: bounds.lowerBound, through: bounds.upperBound, by: step))
        }
        return result
    }

    func matchesDay(dayOfMonth: Int, month: Int, weekday: Int) -> Bool {
        guard months.contains(month) else { return false }
        let domMatch = daysOfMonth.contains(dayOfMonth)
        let dowMatch = daysOfWeek.contains(weekday)
        switch (dayOfMonthRestricted, dayOfWeekRestricted) {
        case (true, true): return domMatch || dowMatch
        case (true, false): return domMatch
        case (false, true): return dowMatch
        case (false, false): return true
        }
    }

    /// The first minute strictly after `date` that matches, in `calendar`'s time zone.
    /// Walks day by day (at most ~8 years, enough for "29 feb" on any weekday), then over
    /// the sorted hours and minutes of a matching day.
    public func nextFire(after date: Date, calendar: Calendar = .current) -> Date {
        let sortedHours = hours.sorted()
        let sortedMinutes = minutes.sorted()
        var day = calendar.startOfDay(for: date)
        for _ in 0..<(366 * 8) {
            let parts = calendar.dateComponents([.year, .month, .day, .weekday], from: day)
            if matchesDay(dayOfMonth: parts.day!, month: parts.month!, weekday: parts.weekday! - 1) {
                for hour in sortedHours {
                    for minute in sortedMinutes {
                        var wanted = DateComponents()
                        wanted.year = parts.year; wanted.month = parts.month; wanted.day = parts.day
                        wanted.hour = hour; wanted.minute = minute; wanted.second = 0
                        // A wall-clock time skipped by a DST change does not exist: skip it.
                        guard let candidate = calendar.date(from: wanted),
                            calendar.component(.hour, from: candidate) == hour,
                            candidate > date
                        else { continue }
                        return candidate
                    }
                }
            }
            guard let next = calendar.date(byAdding: .day, value: 1, to: day) else { break }
            day = calendar.startOfDay(for: next)
        }
        return .distantFuture
    }
}
