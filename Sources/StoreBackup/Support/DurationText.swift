import Foundation

/// Durations as the configuration writes them: `90s`, `10m`, `6h`, `1d`, `1h30m`, `2w`
/// (a bare number is seconds).
package enum DurationText {
    static let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]

    package static func parseSeconds(_ text: String) throws -> TimeInterval {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        if let plain = Double(trimmed), plain >= 0 { return plain }
        var total: TimeInterval = 0
        var number = ""
        var sawUnit = false
        for character in trimmed {
            if character.isNumber || character == "." {
                number.append(character)
            } else if let unit = units[character], let value = Double(number) {
                total += value * unit
                number = ""
                sawUnit = true
            } else {
                throw StoreBackupError.invalidSchedule(reason: "\"\(text)\" is not a duration; use e.g. 90s, 10m, 6h, 1d, 1h30m")
            }
        }
        guard number.isEmpty, sawUnit else {
            throw StoreBackupError.invalidSchedule(reason: "\"\(text)\" is not a duration; use e.g. 90s, 10m, 6h, 1d, 1h30m")
        }
        return total
    }

    package static func format(_ seconds: TimeInterval) -> String {
        var rest = Int(seconds.rounded())
        if rest == 0 { return "0s" }
        var text = ""
        for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        return text
    }
}
