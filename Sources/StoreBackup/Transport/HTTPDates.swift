import Foundation

/// Dates as web services write them, read in one place for every backend. Read by hand on
/// ``UTCTimestamp``'s arithmetic rather than with Foundation's formatters: on Linux those
/// go through ICU, whose tables a listing would otherwise page in for a handful of dates.
enum HTTPDates {
    /// ISO 8601 with or without fractional seconds, in UTC (`Z`) or with an offset, as S3
    /// (`LastModified`, `Initiated`, `x-amz-object-lock-retain-until-date`) and Dropbox
    /// (`server_modified`) write it.
    static func iso8601(_ text: String) -> Date? {
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
            let local = UTCTimestamp.date(
                of: UTCTimestamp.Fields(year: year, month: month, day: day, hour: hour, minute: minute, second: second))
        else { return nil }
        return Date(timeIntervalSince1970: local.timeIntervalSince1970 - Double(offsetSeconds) + fraction)
    }

    /// An HTTP date as RFC 9110 lets a server send it: `Sun, 06 Nov 1994 08:49:37 GMT`, or
    /// one of the two obsolete forms (`Sunday, 06-Nov-94 08:49:37 GMT`, asctime's
    /// `Sun Nov  6 08:49:37 1994`), as WebDAV's `getlastmodified` carries it.
    static func http(_ text: String, now: Date = Date()) -> Date? {
        imfFixdate(text) ?? rfc850(text, now: now) ?? asctime(text)
    }

    private static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `Sun, 06 Nov 1994 08:49:37 GMT`
    private static func imfFixdate(_ text: String) -> Date? {
        var reader = DateTextReader(text)
        guard reader.letters(count: 3) != nil, reader.skip(", "), let day = reader.number(digits: 2), reader.skip(" "),
            let month = reader.month(), reader.skip(" "), let year = reader.number(digits: 4), reader.skip(" ")
        else { return nil }
        return reader.timeOfDay(year: year, month: month, day: day, then: " GMT")
    }

    /// `Sunday, 06-Nov-94 08:49:37 GMT`: a two-digit year is the latest one with those
    /// digits that is not more than 50 years ahead (RFC 9110, 5.6.7).
    private static func rfc850(_ text: String, now: Date) -> Date? {
        var reader = DateTextReader(text)
        guard reader.letters(count: nil) != nil, reader.skip(", "), let day = reader.number(digits: 2), reader.skip("-"),
            let month = reader.month(), reader.skip("-"), let shortYear = reader.number(digits: 2), reader.skip(" ")
        else { return nil }
        let thisYear = UTCTimestamp.fields(of: now).year
        var year = thisYear - thisYear % 100 + shortYear
        if year > thisYear + 50 { year -= 100 }
        return reader.timeOfDay(year: year, month: month, day: day, then: " GMT")
    }

    /// `Sun Nov  6 08:49:37 1994`
    private static func asctime(_ text: String) -> Date? {
        var reader = DateTextReader(text)
        guard reader.letters(count: 3) != nil, reader.skip(" "), let month = reader.month(), reader.skip(" ") else { return nil }
        _ = reader.skip(" ")  // a one-digit day is padded with a space
        guard let day = reader.number(digits: 1...2), reader.skip(" "),
            let hour = reader.number(digits: 2), reader.skip(":"), let minute = reader.number(digits: 2), reader.skip(":"),
            let second = reader.number(digits: 2), reader.skip(" "), let year = reader.number(digits: 4), reader.atEnd
        else { return nil }
        return UTCTimestamp.date(of: UTCTimestamp.Fields(year: year, month: month, day: day, hour: hour, minute: minute, second: second))
    }

    /// Reads a date's text from left to right, ASCII only; every read either consumes what
    /// it matched or fails.
    private struct DateTextReader {
        let bytes: [UInt8]
        var position = 0

        init(_ text: String) { bytes = Array(text.utf8) }

        var atEnd: Bool { position == bytes.count }

        mutating func skip(_ literal: String) -> Bool {
            let wanted = Array(literal.utf8)
            guard bytes.count - position >= wanted.count, Array(bytes[position..<position + wanted.count]) == wanted else { return false }
            position += wanted.count
            return true
        }

        /// Exactly `digits` ASCII digits.
        mutating func number(digits: Int) -> Int? { number(digits: digits...digits) }

        /// As many ASCII digits as `digits` allows, at least its lower bound.
        mutating func number(digits: ClosedRange<Int>) -> Int? {
            var value = 0
            var count = 0
            while count < digits.upperBound, position < bytes.count, let digit = Self.digit(bytes[position]) {
                value = value * 10 + digit
                count += 1
                position += 1
            }
            return count >= digits.lowerBound ? value : nil
        }

        /// The digits after a decimal point, as a fraction of a second.
        mutating func fraction() -> Double? {
            var value = 0.0
            var scale = 1.0
            let start = position
            while position < bytes.count, let digit = Self.digit(bytes[position]) {
                scale /= 10
                value += Double(digit) * scale
                position += 1
            }
            return position > start ? value : nil
        }

        /// ASCII letters: exactly `count` of them, or at least one when `count` is nil.
        mutating func letters(count: Int?) -> String? {
            let start = position
            while position < bytes.count, count == nil || position - start < count!,
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(bytes[position] & 0xDF)
            {
                position += 1
            }
            guard position > start, count == nil || position - start == count else { return nil }
            return String(decoding: bytes[start..<position], as: UTF8.self)
        }

        /// A month's English abbreviation, as its number.
        mutating func month() -> Int? {
            guard let name = letters(count: 3), let index = HTTPDates.monthNames.firstIndex(of: name) else { return nil }
            return index + 1
        }

        /// `08:49:37`, then `suffix` and the end of the text.
        mutating func timeOfDay(year: Int, month: Int, day: Int, then suffix: String) -> Date? {
            guard let hour = number(digits: 2), skip(":"), let minute = number(digits: 2), skip(":"),
                let second = number(digits: 2), skip(suffix), atEnd
            else { return nil }
            return UTCTimestamp.date(
                of: UTCTimestamp.Fields(year: year, month: month, day: day, hour: hour, minute: minute, second: second))
        }

        private static func digit(_ byte: UInt8) -> Int? {
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) ? Int(byte - UInt8(ascii: "0")) : nil
        }
    }
}
