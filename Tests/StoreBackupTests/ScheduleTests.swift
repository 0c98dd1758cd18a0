import Foundation
import XCTest

@testable import StoreBackup

/// Next-fire computations on fixed dates in UTC (no dependence on the machine's zone),
/// plus one DST day in a named zone.
final class ScheduleTests: XCTestCase {
    var utc: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    func date(_ text: String, zone: String = "UTC") -> Date {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: zone)
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.date(from: text)!
    }

    func next(_ schedule: String, after: String) throws -> Date {
        try Schedule.parse(schedule).nextFire(after: date(after), calendar: utc)
    }

    func testParsesEachForm() throws {
        XCTAssertEqual(try Schedule.parse("daily 02:30"), .daily(hour: 2, minute: 30))
        XCTAssertEqual(try Schedule.parse("every 6h"), .every(seconds: 21_600))
        XCTAssertEqual(try Schedule.parse("every 1h30m"), .every(seconds: 5_400))
        XCTAssertEqual(try Schedule.parse("every 2s"), .every(seconds: 2))
        XCTAssertEqual(try Schedule.parse("0 3 * * 1-5").description, "0 3 * * 1-5")
        XCTAssertEqual(try Schedule.parse("every 90m").description, "every 1h30m")
        for bad in [
            "daily 25:00", "daily", "every", "every 0s", "every 5x", "61 * * * *", "* * * *", "0 0 * * 8", "*/0 * * * *", "5-1 * * * *",
            "tomorrow",
        ] {
            XCTAssertThrowsError(try Schedule.parse(bad), bad)
        }
    }

    func testDailyFiresAtTheNextOccurrenceOfTheTime() throws {
        XCTAssertEqual(try next("daily 02:30", after: "2026-03-10 01:00:00"), date("2026-03-10 02:30:00"))
        XCTAssertEqual(try next("daily 02:30", after: "2026-03-10 02:30:00"), date("2026-03-11 02:30:00"), "strictly after")
        XCTAssertEqual(try next("daily 23:59", after: "2026-12-31 23:59:30"), date("2027-01-01 23:59:00"))
    }

    func testCronFields() throws {
        XCTAssertEqual(try next("*/15 * * * *", after: "2026-03-10 10:07:00"), date("2026-03-10 10:15:00"))
        XCTAssertEqual(try next("*/15 * * * *", after: "2026-03-10 23:50:00"), date("2026-03-11 00:00:00"))
        // 2026-03-13 is a Friday: weekdays only skips to Monday the 16th.
        XCTAssertEqual(try next("0 3 * * 1-5", after: "2026-03-13 03:00:00"), date("2026-03-16 03:00:00"))
        XCTAssertEqual(try next("0 3 * * mon-fri", after: "2026-03-13 03:00:00"), date("2026-03-16 03:00:00"))
        // Sunday as 0 and 7.
        XCTAssertEqual(try next("0 9 * * 0", after: "2026-03-10 00:00:00"), date("2026-03-15 09:00:00"))
        XCTAssertEqual(try next("0 9 * * 7", after: "2026-03-10 00:00:00"), date("2026-03-15 09:00:00"))
        // 29 February: the next leap year.
        XCTAssertEqual(try next("0 0 29 2 *", after: "2026-03-01 00:00:00"), date("2028-02-29 00:00:00"))
        // Day of month OR day of week when both are restricted (Vixie cron).
        XCTAssertEqual(try next("0 12 20 * mon", after: "2026-03-10 13:00:00"), date("2026-03-16 12:00:00"))
        XCTAssertEqual(try next("0 12 12 * mon", after: "2026-03-10 13:00:00"), date("2026-03-12 12:00:00"))
        // Names, lists and a step from a value.
        XCTAssertEqual(try next("0 6 1 jan,jul *", after: "2026-03-10 00:00:00"), date("2026-07-01 06:00:00"))
        XCTAssertEqual(try next("5/20 * * * *", after: "2026-03-10 10:26:00"), date("2026-03-10 10:45:00"))
        XCTAssertEqual(try next("30 2 * * *", after: "2026-03-10 02:30:00"), date("2026-03-11 02:30:00"))
    }

    func testIntervalAndMissedRuns() throws {
        let every = try Schedule.parse("every 6h")
        XCTAssertEqual(every.nextFire(after: date("2026-03-10 10:00:00"), calendar: utc), date("2026-03-10 16:00:00"))
        XCTAssertTrue(every.missedRun(lastRun: date("2026-03-10 10:00:00"), now: date("2026-03-10 16:00:01"), calendar: utc))
        XCTAssertFalse(every.missedRun(lastRun: date("2026-03-10 10:00:00"), now: date("2026-03-10 15:59:59"), calendar: utc))
        // After a run: from when it fired, not when it ended; firings a long run missed are skipped.
        let minute = try Schedule.parse("every 1m")
        let fired = date("2026-03-10 10:00:00")
        XCTAssertEqual(
            minute.nextFire(afterRunFiredAt: fired, endedAt: date("2026-03-10 10:00:20"), calendar: utc), date("2026-03-10 10:01:00"))
        XCTAssertEqual(
            minute.nextFire(afterRunFiredAt: fired, endedAt: date("2026-03-10 10:02:30"), calendar: utc), date("2026-03-10 10:03:00"))
        XCTAssertEqual(
            minute.nextFire(afterRunFiredAt: fired, endedAt: date("2026-03-10 10:01:00"), calendar: utc), date("2026-03-10 10:02:00"))
        let daily = try Schedule.parse("daily 02:30")
        XCTAssertEqual(
            daily.nextFire(afterRunFiredAt: date("2026-03-10 02:30:00"), endedAt: date("2026-03-10 02:40:00"), calendar: utc),
            date("2026-03-11 02:30:00"))
        XCTAssertTrue(daily.missedRun(lastRun: date("2026-03-09 02:30:05"), now: date("2026-03-10 08:00:00"), calendar: utc))
        XCTAssertFalse(daily.missedRun(lastRun: date("2026-03-10 02:30:05"), now: date("2026-03-10 08:00:00"), calendar: utc))
    }

    /// On the day clocks jump from 02:00 to 03:00, 02:30 does not exist: daily fires at the
    /// first time after the gap that day; cron skips the non-existent minute.
    func testDaylightSavingGap() throws {
        var berlin = Calendar(identifier: .gregorian)
        berlin.timeZone = TimeZone(identifier: "Europe/Berlin")!
        let before = date("2026-03-29 00:00:00", zone: "Europe/Berlin")
        let daily = Schedule.daily(hour: 2, minute: 30).nextFire(after: before, calendar: berlin)
        XCTAssertEqual(berlin.component(.day, from: daily), 29)
        XCTAssertGreaterThanOrEqual(berlin.component(.hour, from: daily), 3)
        let cron = try Schedule.parse("30 2 * * *").nextFire(after: before, calendar: berlin)
        XCTAssertEqual(cron, date("2026-03-30 02:30:00", zone: "Europe/Berlin"))
    }

    func testDurations() throws {
        XCTAssertEqual(try DurationText.parseSeconds("10m"), 600)
        XCTAssertEqual(try DurationText.parseSeconds("1d2h"), 93_600)
        XCTAssertEqual(try DurationText.parseSeconds("45"), 45)
        XCTAssertThrowsError(try DurationText.parseSeconds("10 minutes"))
        XCTAssertEqual(try RetentionSpan.parse("1y5m7d2h"), RetentionSpan(years: 1, months: 5, days: 7, hours: 2))
        XCTAssertThrowsError(try RetentionSpan.parse("5s"))
    }
}
