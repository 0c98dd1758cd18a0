import Foundation

/// Backup file names: `<date> Stores.zip`.
///
/// storebackup writes a sortable UTC date to the second, e.g. `2026-11-22 031507 Stores.zip`.
/// An incremental backup also names the date of its base (the backup it applies to):
/// `2026-11-23 031502 incremental on 2026-11-22 031507 Stores.zip`, so that `list`, `prune`
/// and a person can see the chain without opening an archive.
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

    /// What sits between an incremental backup's date and its base's date.
    static let incrementalInfix = " incremental on "

    /// The name of an incremental backup made at `date` on the backup named `base`.
    static func makeIncremental(for date: Date, base: String) -> String? {
        guard let baseDate = self.date(of: base), UTCTimestamp.parseCompact(base.prefix(17)) != nil else { return nil }
        return UTCTimestamp.compact(date) + incrementalInfix + UTCTimestamp.compact(baseDate) + suffix
    }

    /// For an incremental backup's name, the compact date (`yyyy-MM-dd HHmmss`) of its base;
    /// nil for a full backup's name.
    static func baseDateText(of name: String) -> Substring? {
        guard isBackup(name) else { return nil }
        let stem = name.dropLast(suffix.count)
        guard stem.utf8.count == 17 + incrementalInfix.utf8.count + 17,
            UTCTimestamp.parseCompact(stem.prefix(17)) != nil,
            stem.dropFirst(17).hasPrefix(incrementalInfix)
        else { return nil }
        let base = stem.suffix(17)
        return UTCTimestamp.parseCompact(base) == nil ? nil : base
    }

    /// Whether `name` is an incremental backup's (see ``makeIncremental(for:base:)``).
    static func isIncremental(_ name: String) -> Bool { baseDateText(of: name) != nil }

    /// The name among `names` that an incremental backup's name points to as its base: the
    /// one whose own date is the base date (a full or another incremental); nil when none.
    static func base(of name: String, among names: [String]) -> String? {
        guard let baseDate = baseDateText(of: name) else { return nil }
        return names.first { $0 != name && isBackup($0) && $0.hasPrefix(baseDate) && ownDateText(of: $0) == baseDate }
    }

    /// The compact date a storebackup name starts with.
    static func ownDateText(of name: String) -> Substring? {
        guard isBackup(name), UTCTimestamp.parseCompact(name.prefix(17)) != nil else { return nil }
        let rest = name.dropFirst(17)
        guard rest == suffix[...] || baseDateText(of: name) != nil else { return nil }
        return name.prefix(17)
    }

    /// The date a name carries, or nil when it carries none we know.
    static func date(of name: String) -> Date? {
        guard isBackup(name) else { return nil }
        let stem = name.dropLast(suffix.count)
        if let date = UTCTimestamp.parseCompact(stem) { return date }
        if baseDateText(of: name) != nil { return UTCTimestamp.parseCompact(stem.prefix(17)) }
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
