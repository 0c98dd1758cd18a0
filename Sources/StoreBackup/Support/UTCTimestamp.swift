import Foundation

/// Dates as the fixed UTC texts storebackup writes, by integer arithmetic on the proleptic
/// Gregorian calendar (as ISO 8601 counts). A `DateFormatter` is slow to make, and every
/// command that names or lists backups or takes a lock would pay for one.
enum UTCTimestamp {
    /// The civil date and time of a UTC instant, to the second (rounded down).
    struct Fields: Equatable {
        var year, month, day, hour, minute, second: Int
    }

    static func fields(of date: Date) -> Fields {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let (days, secondOfDay) = seconds.floorDivided(by: 86_400)
        let (year, month, day) = civil(fromDays: days)
        return Fields(
            year: year, month: month, day: day,
            hour: secondOfDay / 3600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60)
    }

    /// The instant of `fields` in UTC; nil unless every field is in its range (a strict
    /// reading: 2025-13-45 is no date, not a date rolled over into 2026).
    static func date(of fields: Fields) -> Date? {
        guard (1...9999).contains(fields.year), (1...12).contains(fields.month),
            (1...daysInMonth(fields.month, of: fields.year)).contains(fields.day),
            (0...23).contains(fields.hour), (0...59).contains(fields.minute), (0...59).contains(fields.second)
        else { return nil }
        let days = self.days(fromCivil: fields.year, fields.month, fields.day)
        return Date(timeIntervalSince1970: Double(days * 86_400 + fields.hour * 3600 + fields.minute * 60 + fields.second))
    }

    /// `2026-11-22 031507`: the date in backup names.
    static func compact(_ date: Date) -> String {
        let f = fields(of: date)
        return
            "\(digits(f.year, 4))-\(digits(f.month, 2))-\(digits(f.day, 2)) \(digits(f.hour, 2))\(digits(f.minute, 2))\(digits(f.second, 2))"
    }

    /// Reads ``compact(_:)``'s form back: exactly `yyyy-MM-dd HHmmss` in ASCII digits.
    static func parseCompact(_ text: Substring) -> Date? {
        var reader = DateTextReader(text)
        guard let year = reader.number(digits: 4), reader.skip("-"), let month = reader.number(digits: 2), reader.skip("-"),
            let day = reader.number(digits: 2), reader.skip(" "), let hour = reader.number(digits: 2),
            let minute = reader.number(digits: 2), let second = reader.number(digits: 2), reader.atEnd
        else { return nil }
        return date(of: Fields(year: year, month: month, day: day, hour: hour, minute: minute, second: second))
    }

    /// `2026-11-22T03:15:07Z`.
    static func iso8601(_ date: Date) -> String {
        let f = fields(of: date)
        return
            "\(digits(f.year, 4))-\(digits(f.month, 2))-\(digits(f.day, 2))T\(digits(f.hour, 2)):\(digits(f.minute, 2)):\(digits(f.second, 2))Z"
    }

    /// Reads ISO 8601's internet form back: ``iso8601(_:)``'s, and as web services write it,
    /// with a fraction of a second or an offset instead of `Z`.
    static func parseISO8601(_ text: String) -> Date? {
        var reader = DateTextReader(text)
        guard let year = reader.number(digits: 4), reader.skip("-"), let month = reader.number(digits: 2), reader.skip("-"),
            let day = reader.number(digits: 2), reader.skip("T") || reader.skip("t"),
            let hour = reader.number(digits: 2), reader.skip(":"), let minute = reader.number(digits: 2), reader.skip(":"),
            let second = reader.number(digits: 2)
        else { return nil }
        let fraction = reader.skip(".") ? reader.fraction() : 0
        guard let fraction else { return nil }
        let offsetSeconds: Int
        if reader.skip("Z") || reader.skip("z") {
            offsetSeconds = 0
        } else {
            let sign = reader.skip("+") ? 1 : reader.skip("-") ? -1 : 0
            guard sign != 0, let offsetHours = reader.number(digits: 2), offsetHours <= 23 else { return nil }
            _ = reader.skip(":")
            guard let offsetMinutes = reader.number(digits: 2), offsetMinutes <= 59 else { return nil }
            offsetSeconds = sign * (offsetHours * 3600 + offsetMinutes * 60)
        }
        guard reader.atEnd,
            let local = date(of: Fields(year: year, month: month, day: day, hour: hour, minute: minute, second: second))
        else { return nil }
        return Date(timeIntervalSince1970: local.timeIntervalSince1970 - Double(offsetSeconds) + fraction)
    }

    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    private static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    private static func daysInMonth(_ month: Int, of year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Days since 1970-01-01 and back, counted in 400-year eras of 146,097 days with March
    // as the first month, so the leap day falls at the end of each year.
    private static func days(fromCivil year: Int, _ month: Int, _ day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let (era, yearOfEra) = y.floorDivided(by: 400)
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func civil(fromDays days: Int) -> (year: Int, month: Int, day: Int) {
        let (era, dayOfEra) = (days + 719_468).floorDivided(by: 146_097)
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

private extension Int {
    /// Quotient rounded toward minus infinity, and the remainder that goes with it (never negative).
    func floorDivided(by divisor: Int) -> (quotient: Int, remainder: Int) {
        let remainder = self % divisor
        return remainder < 0 ? (self / divisor - 1, remainder + divisor) : (self / divisor, remainder)
    }
}
