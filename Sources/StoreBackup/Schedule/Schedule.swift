import Foundation

/// When a store is backed up: every day at a local time, a 5-field cron expression, or a
/// fixed interval.
///
/// Written as text in the configuration: `daily 02:30`, `0 3 * * 1-5`, `every 6h`,
/// `every 90s`, `every 1h30m`.
public enum Schedule: Sendable, Equatable, CustomStringConvertible {
    /// Every day at this local wall-clock time.
    case daily(hour: Int, minute: Int)
    /// A cron expression (minute hour day-of-month month day-of-week), in local time.
    case cron(CronExpression)
    /// A fixed interval, counted from the previous run.
    case every(seconds: TimeInterval)

    /// Parses the configuration's text form; the error says what was expected.
    public static func parse(_ text: String) throws -> Schedule {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let words = trimmed.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        if words.first?.lowercased() == "daily" {
            guard words.count == 2 else { throw StoreBackupError.invalidSchedule(reason: "\"daily\" needs a time, e.g. \"daily 02:30\"") }
            let parts = words[1].split(separator: ":").map { Int($0) }
            guard parts.count == 2, let hour = parts[0], let minute = parts[1],
                (0...23).contains(hour), (0...59).contains(minute)
            else {
                throw StoreBackupError.invalidSchedule(reason: "\"\(words[1])\" is not a time of day; use HH:MM, e.g. 02:30")
            }
            return .daily(hour: hour, minute: minute)
        }
        if words.first?.lowercased() == "every" {
            guard words.count == 2 else { throw StoreBackupError.invalidSchedule(reason: "\"every\" needs an interval, e.g. \"every 6h\"") }
            let seconds = try DurationText.parseSeconds(words[1])
            guard seconds >= 1 else { throw StoreBackupError.invalidSchedule(reason: "the interval must be at least 1s") }
            return .every(seconds: seconds)
        }
        if words.count == 5 { return .cron(try CronExpression(trimmed)) }
        throw StoreBackupError.invalidSchedule(
            reason: "\"\(text)\" is not a schedule; use \"daily HH:MM\", a 5-field cron expression, or \"every <interval>\" (e.g. every 6h)"
        )
    }

    /// The configuration's spelling, e.g. `daily 02:30` or `every 6h`, as ``parse(_:)`` reads it.
    public var description: String {
        switch self {
        case .daily(let hour, let minute): return String(format: "daily %02d:%02d", hour, minute)
        case .cron(let expression): return expression.text
        case .every(let seconds): return "every \(DurationText.format(seconds))"
        }
    }

    /// The first time strictly after `date` at which this schedule fires; `calendar` (by
    /// default the local one) places daily and cron times.
    public func nextFire(after date: Date, calendar: Calendar? = nil) -> Date {
        // The local calendar is made only where it is needed: making it loads the time zone
        // through ICU, megabytes of the program's pages in a service that fires every minute.
        switch self {
        case .daily(let hour, let minute):
            // .nextTime: on a day where HH:MM does not exist (DST gap) fire at the first time after it.
            return (calendar ?? .current).nextDate(
                after: date, matching: DateComponents(hour: hour, minute: minute, second: 0),
                matchingPolicy: .nextTime) ?? date.addingTimeInterval(86_400)
        case .cron(let expression):
            return expression.nextFire(after: date, calendar: calendar ?? .current)
        case .every(let seconds):
            return date.addingTimeInterval(seconds)
        }
    }

    /// The next firing after a run that fired at `fired` and ended at `now`. An interval
    /// counts from when the run fired, not from when it ended, so points a minute apart stay a
    /// minute apart however long each takes; firings missed during a long run are skipped.
    public func nextFire(afterRunFiredAt fired: Date, endedAt now: Date, calendar: Calendar? = nil) -> Date {
        guard case .every(let seconds) = self, seconds > 0 else { return nextFire(after: max(fired, now), calendar: calendar) }
        let missed = max(0, (now.timeIntervalSince(fired) / seconds).rounded(.down))
        return fired.addingTimeInterval((missed + 1) * seconds)
    }

    /// Whether a firing was due between `lastRun` and `now` and did not happen (the machine
    /// was off or the service stopped): the service then runs once at start-up.
    public func missedRun(lastRun: Date, now: Date, calendar: Calendar? = nil) -> Bool {
        nextFire(after: lastRun, calendar: calendar) <= now
    }
}
