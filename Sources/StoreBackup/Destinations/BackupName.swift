import Foundation

/// Backup file names: `<date> Stores.zip`.
///
/// storebackup writes a sortable UTC date to the second, e.g. `2026-11-22 031507 Stores.zip`.
/// The seed app named its backups like `[2026-Nov-21] 10.15 PM Stores.zip` (local time);
/// those are listed and restorable too.
enum BackupName {
    /// Every backup name ends with this.
    static let suffix = " Stores.zip"

    /// Whether `name` looks like a backup (ends with ``suffix``).
    static func isBackup(_ name: String) -> Bool {
        name.hasSuffix(suffix) && !name.hasPrefix(".") && name.count > suffix.count
    }

    /// The name for a backup made at `date`: `yyyy-MM-dd HHmmss Stores.zip` in UTC, so names sort by time.
    static func make(for date: Date) -> String {
        UTCTimestamp.compact(date) + suffix
    }

    /// The date a name carries, or nil when it carries none we know.
    static func date(of name: String) -> Date? {
        guard isBackup(name) else { return nil }
        let stem = name.dropLast(suffix.count)
        if let date = UTCTimestamp.parseCompact(stem) { return date }
        guard stem.hasPrefix("[") else { return nil }
        // The seed's names, in local time: rare, so a formatter is made only for them.
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone.current
        formatter.dateFormat = "'['yyyy-MMM-dd']' hh.mm a"
        formatter.isLenient = false
        // Strict: the date must print back to the same text, so "[2026-Feb-30] 10.15 PM"
        // (which a lenient parser rolls over into a real date) carries no date.
        guard let date = formatter.date(from: String(stem)), formatter.string(from: date) == stem else { return nil }
        return date
    }

    /// A name that is safe to use as a single file name anywhere.
    static func validate(_ name: String) throws {
        guard isBackup(name), !name.contains("/"), !name.contains("\0"), name != "..", name.utf8.count < 255 else {
            throw StoreBackupError.invalidBackupName(name: name)
        }
    }
}
