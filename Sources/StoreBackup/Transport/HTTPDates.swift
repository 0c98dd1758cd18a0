import Foundation

/// Dates as web services write them, read in one place for every backend.
enum HTTPDates {
    /// ISO 8601 with or without fractional seconds, as S3 (`LastModified`, `Initiated`)
    /// and Dropbox (`server_modified`) write it.
    static func iso8601(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, and the two obsolete forms servers
    /// may still send), as WebDAV's `getlastmodified` carries it.
    static func http(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for pattern in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = pattern
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
