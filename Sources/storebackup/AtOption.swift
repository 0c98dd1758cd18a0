import ArgumentParser
import Foundation
import StoreBackup

/// `--at TIME`: the newest backup made at or before a moment, by its manifest's time.
struct AtOption: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Use the newest backup made at or before this time, by the time its manifest records: ISO 8601 (2026-12-05T14:04:00Z, or 2026-12-05 14:04 in local time), \"15 minutes ago\", \"yesterday 14:04\".",
            valueName: "time"))
    var at: String?

    func validate() throws {
        if let at, PointInTime.parse(at) == nil {
            throw ValidationError("--at: \"\(at)\" is not a time (ISO 8601, \"N minutes ago\", \"yesterday HH:MM\")")
        }
    }

    /// The moment asked for, nil without --at.
    func date() -> Date? { at.flatMap { PointInTime.parse($0) } }
}
