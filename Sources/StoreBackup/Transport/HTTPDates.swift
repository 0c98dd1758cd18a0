import Foundation

/// Dates as web services write them, read in one place for every backend. Read by hand on
/// ``UTCTimestamp``'s arithmetic rather than with Foundation's formatters: on Linux those
/// go through ICU, whose tables a listing would otherwise page in for a handful of dates.
enum HTTPDates {
    /// ISO 8601 with or without fractional seconds, in UTC (`Z`) or with an offset, as S3
    /// (`LastModified`, `Initiated`, `x-amz-object-lock-retain-until-date`) and Dropbox
    /// (`server_modified`) write it.
    static func iso8601(_ text: String) -> Date? { UTCTimestamp.parseISO8601(text) }

    /// An HTTP date as RFC 9110 lets a server send it: `Sun, 06 Nov 1994 08:49:37 GMT`, or
    /// one of the two obsolete forms (`Sunday, 06-Nov-94 08:49:37 GMT`, asctime's
    /// `Sun Nov  6 08:49:37 1994`), as WebDAV's `getlastmodified` carries it.
    static func http(_ text: String, now: Date = Date()) -> Date? {
        imfFixdate(text) ?? rfc850(text, now: now) ?? asctime(text)
    }

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
}
