import Foundation

/// Every failure the library reports. Cases carry what a caller needs to act on;
/// `description` is the one line the command line prints.
public enum StoreBackupError: Error, Equatable, Sendable, CustomStringConvertible {
    case storesDirectoryMissing(path: String)
    case storesDirectoryUnreadable(path: String, reason: String)
    case noDatabases(path: String)
    case storeLocked(path: String, holder: String)
    case backupNotFound(name: String, destination: String)
    case backupExists(name: String, destination: String)
    case noBackups(destination: String)
    case invalidBackupName(name: String)
    case corruptArchive(name: String, reason: String)
    case unsafeArchiveEntry(name: String, entry: String)
    case checksumMismatch(name: String, entry: String)
    case databaseCheckFailed(path: String, result: String)
    case sqlite(path: String, operation: String, message: String)
    case archiveWrite(reason: String)
    case io(path: String, operation: String, errno: Int32)
    case destination(destination: String, reason: String)
    case invalidDestination(url: String, reason: String)
    case reloadFailed(reason: String, rolledBack: Bool)
    case restoreRefused(reason: String)
    /// No password could be had (none given, or an empty one), or the two entries differ.
    case passwordUnavailable(reason: String)
    /// The backup is encrypted and no password was given.
    case passwordRequired(name: String)
    /// The password does not open the backup.
    case wrongPassword(name: String)
    case cancelled

    public var description: String {
        switch self {
        case .storesDirectoryMissing(let path):
            return "stores directory \(path) does not exist"
        case .storesDirectoryUnreadable(let path, let reason):
            return "cannot read stores directory \(path): \(reason)"
        case .noDatabases(let path):
            return "no SQLite database found in \(path) (looked for files starting with the SQLite header)"
        case .storeLocked(let path, let holder):
            return "\(path) is in use by another storebackup command (\(holder)); try again when it has finished"
        case .backupNotFound(let name, let destination):
            return "no backup named \"\(name)\" in \(destination) (see: storebackup list)"
        case .backupExists(let name, let destination):
            return "a backup named \"\(name)\" already exists in \(destination); refusing to overwrite it"
        case .noBackups(let destination):
            return "there are no backups in \(destination)"
        case .invalidBackupName(let name):
            return "\"\(name)\" is not a backup name (backups are named \"<date> Stores.zip\")"
        case .corruptArchive(let name, let reason):
            return "backup \"\(name)\" is damaged: \(reason)"
        case .unsafeArchiveEntry(let name, let entry):
            return "backup \"\(name)\" contains an unsafe path \"\(entry)\" that would land outside the stores directory; refusing to restore it"
        case .checksumMismatch(let name, let entry):
            return "backup \"\(name)\" is damaged: \(entry) does not match the checksum in its manifest"
        case .databaseCheckFailed(let path, let result):
            return "database \(path) failed its integrity check: \(result)"
        case .sqlite(let path, let operation, let message):
            return "SQLite error on \(path) during \(operation): \(message)"
        case .archiveWrite(let reason):
            return "could not write the archive: \(reason)"
        case .io(let path, let operation, let code):
            return "\(operation) \(path): \(String(cString: strerror(code)))"
        case .destination(let destination, let reason):
            return "\(destination): \(reason)"
        case .invalidDestination(let url, let reason):
            return "invalid destination \"\(url)\": \(reason)"
        case .reloadFailed(let reason, let rolledBack):
            return rolledBack
                ? "the restored store failed to load (\(reason)); the previous store was put back"
                : "the restored store failed to load (\(reason)) and the previous store could not be put back"
        case .restoreRefused(let reason):
            return reason
        case .passwordUnavailable(let reason):
            return "no usable password: \(reason)"
        case .passwordRequired(let name):
            return "backup \"\(name)\" is encrypted; give its password with --password-file FILE, STOREBACKUP_PASSWORD, or at the prompt on a terminal"
        case .wrongPassword(let name):
            return "wrong password for backup \"\(name)\""
        case .cancelled:
            return "cancelled; nothing was changed"
        }
    }
}
