import Foundation

/// A moment as `restore --at` takes it: ISO 8601 with a zone (`2026-12-05T14:04:00Z`,
/// `…+01:00`), or without one in local time (`2026-12-05T14:04`, `2026-12-05 14:04:30`),
/// `N seconds|minutes|hours|days ago`, `yesterday HH:MM` and `today HH:MM`.
public enum PointInTime {
    /// The moment `text` names, relative to `now` in `timeZone`; nil when it names none.
    public static func parse(_ text: String, now: Date = Date(), timeZone: TimeZone = .current) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        if let ago = agoSeconds(trimmed) { return now.addingTimeInterval(-ago) }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        for (word, days) in [("yesterday", -1), ("today", 0)] where trimmed.hasPrefix(word + " ") {
            guard let time = clockTime(String(trimmed.dropFirst(word.count + 1))),
                let day = calendar.date(byAdding: .day, value: days, to: calendar.startOfDay(for: now))
            else { return nil }
            return calendar.date(bySettingHour: time.hour, minute: time.minute, second: time.second, of: day)
        }
        return iso8601(text.trimmingCharacters(in: .whitespaces), timeZone: timeZone)
    }

    /// `N unit(s) ago` in seconds.
    private static func agoSeconds(_ text: String) -> TimeInterval? {
        let words = text.split(separator: " ")
        guard words.count == 3, words[2] == "ago", let count = Double(words[0]), count >= 0 else { return nil }
        let units: [String: TimeInterval] = ["second": 1, "minute": 60, "hour": 3600, "day": 86_400, "week": 604_800]
        var unit = String(words[1])
        if unit.hasSuffix("s") { unit.removeLast() }
        return units[unit].map { $0 * count }
    }

    /// `HH:MM` or `HH:MM:SS`.
    private static func clockTime(_ text: String) -> (hour: Int, minute: Int, second: Int)? {
        let parts = text.split(separator: ":").map { Int($0) }
        guard (2...3).contains(parts.count), parts.allSatisfy({ $0 != nil }) else { return nil }
        let hour = parts[0]!, minute = parts[1]!, second = parts.count == 3 ? parts[2]! : 0
        guard (0..<24).contains(hour), (0..<60).contains(minute), (0..<61).contains(second) else { return nil }
        return (hour, minute, second)
    }

    private static func iso8601(_ text: String, timeZone: TimeZone) -> Date? {
        let zoned = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [
            [.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds],
        ] {
            zoned.formatOptions = options
            if let date = zoned.date(from: text) { return date }
        }
        let local = DateFormatter()
        local.locale = Locale(identifier: "en_US_POSIX")
        local.timeZone = timeZone
        for format in ["yyyy-MM-dd'T'HH:mm:ss", "yyyy-MM-dd'T'HH:mm", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd HH:mm"] {
            local.dateFormat = format
            if let date = local.date(from: text) { return date }
        }
        return nil
    }
}
