import Foundation

// Dates in storebackup's own JSON files (state, journals, hook input) as
// `2026-11-22T03:15:07Z`, coded on ``UTCTimestamp``'s arithmetic. Foundation's `.iso8601`
// strategies make a time zone, which on Linux goes through ICU and pages in its tables to
// read or write one date.

extension JSONDecoder.DateDecodingStrategy {
    /// Reads what ``JSONEncoder/DateEncodingStrategy/utcTimestamp`` and `.iso8601` write.
    static var utcTimestamp: Self {
        .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = UTCTimestamp.parseISO8601(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "Expected date string to be ISO8601-formatted.")
            }
            return date
        }
    }
}

extension JSONEncoder.DateEncodingStrategy {
    /// Whole seconds in UTC, as `.iso8601` writes them.
    static var utcTimestamp: Self {
        .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(UTCTimestamp.iso8601(date))
        }
    }
}
