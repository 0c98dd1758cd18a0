import Foundation

/// Reads a date's text from left to right, ASCII only (``UTCTimestamp``, ``HTTPDates``);
/// every read either consumes what it matched or fails.
struct DateTextReader {
    static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    let bytes: [UInt8]
    var position = 0

    init(_ text: some StringProtocol) { bytes = Array(text.utf8) }

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
        guard let name = letters(count: 3), let index = Self.monthNames.firstIndex(of: name) else { return nil }
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
