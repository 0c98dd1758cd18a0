import Foundation

/// Every failure the library reports. Cases carry what a caller needs to act on: a
/// transfer failure its structured cause (``TransferFailure``: libcurl code, HTTP status,
/// the service's error code), and ``remedy`` what would help. ``summary`` says what failed,
/// ``description`` adds the remedy in the library's words; a front end such as the command
/// line prints ``summary`` with the remedy in its own words (a flag, a command).
///
/// ```swift
/// do {
///     try await helper.createBackup()
/// } catch StoreBackupError.storeLocked(_, let holder) {
///     // another backup or restore is running: try later
/// } catch StoreBackupError.cancelled {
///     // the task was cancelled: nothing was published
/// } catch let error as StoreBackupError {
///     logger.error("\(error)")   // description says what failed and what to do
/// }
/// ```
public enum StoreBackupError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The stores directory to back up does not exist.
    case storesDirectoryMissing(path: String)
    /// The stores directory (or something in it) could not be read; `reason` says why.
    case storesDirectoryUnreadable(path: String, reason: String)
    /// The stores directory holds no SQLite database (files are recognised by their header).
    case noDatabases(path: String)
    /// Another storebackup operation (this process or another) is working on this store;
    /// `holder` names its pid, host, purpose and start. Try again later.
    case storeLocked(path: String, holder: String)
    /// The destination has no backup by that name.
    case backupNotFound(name: String, destination: String)
    /// Publishing would overwrite an existing backup; storebackup never does that.
    case backupExists(name: String, destination: String)
    /// `latest` was asked for, but the destination holds no backups.
    case noBackups(destination: String)
    /// The name is not a backup's (backups end in " Stores.zip" and contain no slash).
    case invalidBackupName(name: String)
    /// The backup cannot be read as a storebackup archive (truncated, not a ZIP, bad CRC,
    /// no manifest, wrong password); nothing was changed.
    case corruptArchive(name: String, reason: String)
    /// The backup holds a path that would land outside the stores directory; it is refused.
    /// An incremental backup whose chain (its base, the base's base, … down to a full)
    /// is incomplete or does not fit together; nothing was written.
    case brokenChain(name: String, reason: String)
    case unsafeArchiveEntry(name: String, entry: String)
    /// The backup has no manifest, so its files cannot be checked against checksums (it was
    /// not made by storebackup, or was altered); ``ExtractionOptions/allowUnverified`` lets it through.
    case unverifiableBackup(name: String)
    /// A file in the backup does not match the SHA-256 its manifest records.
    case checksumMismatch(name: String, entry: String)
    /// A database failed `PRAGMA integrity_check` (or `quick_check`); `result` is SQLite's answer.
    case databaseCheckFailed(path: String, result: String)
    /// Databases of the backup fail `PRAGMA integrity_check` although their bytes match the
    /// SHA-256 the manifest recorded: they were already damaged in the live store when the
    /// backup was made (the backup kept them faithfully). `databases` are relative paths,
    /// `result` SQLite's answer for the first. ``ExtractionOptions/acceptDamagedDatabases`` restores
    /// such a backup anyway.
    case databaseDamagedAtSource(name: String, databases: [String], result: String)
    /// `create` found a database of the stores directory damaged (SQLite called it malformed
    /// while taking its snapshot); no backup was made.
    case databaseDamagedInStore(path: String, reason: String)
    /// The backup was written in a newer archive format than this version reads
    /// (`newestReadable`, the newest this version reads); nothing was read beyond the format.
    case newerFormat(name: String, format: Int, newestReadable: Int)
    /// SQLite returned an error; `message` is SQLite's.
    case sqlite(path: String, operation: String, message: String)
    /// libzip could not write the archive (disk full, permissions…).
    case archiveWrite(reason: String)
    /// A file-system call failed; `errno` is the C error number.
    case io(path: String, operation: String, errno: Int32)
    /// The destination failed in a way its service describes in words only (a missing answer
    /// field, a backup not listed after its upload…); `reason` says what.
    case destination(destination: String, reason: String)
    /// A transfer to or from a destination failed after retries (network, TLS, SSH host key,
    /// credentials, an HTTP or service error); the ``TransferFailure`` says which, structured.
    case transfer(TransferFailure)
    /// A destination URL or path could not be used (unknown scheme, missing credentials…);
    /// `remedy`, when set, names what would fix it.
    case invalidDestination(url: String, reason: String, remedy: Remedy? = nil)
    /// The app's ``ReloadHooks/reload`` rejected the restored store. `rolledBack` is true when
    /// the previous store is live again (the rejected one is in `<store>_FailedRestore`).
    case reloadFailed(reason: String, rolledBack: Bool)
    /// A restore was refused before touching the live store; `reason` says why
    /// (e.g. a leftover `<store>_New`, or the app's ``ReloadHooks/willSwap`` failed).
    case restoreRefused(reason: String)
    /// A restore was refused because other processes have the store open (or the check could
    /// not see every process); `reason` names them (see ``StoreUsage``). Nothing was changed.
    case storeInUse(reason: String, remedy: Remedy?)
    /// No password could be had (none given, or an empty one), or the two entries differ.
    case passwordUnavailable(reason: String)
    /// The proof key file (``ProofKey``) at `path` cannot be read, made, or trusted.
    case proofKeyUnusable(path: String, reason: String)
    /// The backup is encrypted and no password was given.
    case passwordRequired(name: String)
    /// The password does not open the backup.
    case wrongPassword(name: String)
    /// The configuration file could not be used; the problem says where and why.
    case invalidConfiguration(ConfigurationProblem)
    /// A schedule, duration, rate or retention span could not be read; `reason` says how to write it.
    case invalidSchedule(reason: String)
    /// ``BackupService/backUpNow(_:)`` was asked for a store the service does not have.
    case unknownStore(name: String)
    /// A backup of this store is already running in the ``BackupService``; try again when it has finished.
    case backupAlreadyRunning(store: String)
    /// The task was cancelled; nothing was published and no store was changed.
    case cancelled
    /// The backup holds nothing at these paths (``BackupRepository/extract(_:paths:into:options:progress:)``,
    /// ``BackupRepository/contents(of:matching:)``); nothing was written.
    case notInBackup(name: String, paths: [String])
    /// The backup cannot be deleted yet: S3 Object Lock keeps it until `until` (nil: a
    /// legal hold, or a lock whose date the server did not say). `prune` counts it as kept.
    case backupLocked(name: String, destination: String, until: Date?)
    /// The backup is the base of incremental backups (`dependents`, newest first), which
    /// could no longer be restored without it; nothing was deleted. Deleting them too is
    /// ``BackupRepository/delete(_:withDependents:)`` with `withDependents`.
    case backupHasDependents(name: String, destination: String, dependents: [String])
    /// A point was not published: the chain's newest backup `base`, which it applies to, is
    /// no longer at the destination as it was published (`problem` says how; another host
    /// deleted or replaced it). The chain state is dropped, so the next backup is a full one.
    case chainBaseChanged(base: String, destination: String, problem: String)
    /// An extract was refused before anything was written; `reason` says why (e.g. the
    /// target folder exists and is not empty).
    case extractRefused(reason: String)
    /// A backup just made, or picked by a restore drill, failed its verification; `problem`
    /// says what (see ``VerificationResult/problem``).
    case verificationFailed(backup: String, problem: String)
    /// The backup holds a link that `create` recorded as pointing outside the stores
    /// directory (`target` escaped); restored only with ``ExtractionOptions/allowOutsideLinks``.
    case outsideLink(name: String, link: String, target: String)
    /// The backup holds a link that never resolves (it leads back through itself, or through
    /// more links than the kernel follows); `create` recorded it with the outside links, so
    /// it too is restored only with ``ExtractionOptions/allowOutsideLinks``.
    case linkLoop(name: String, link: String, target: String)
    /// A path that must be a folder is a file (or something else that is not a folder).
    case notAFolder(path: String, what: String)
    /// (Format 4.) One block of a database's entry does not match its SHA-256 in the
    /// manifest (or cannot be read): a query that needs it fails, and SQLite never sees its
    /// bytes; queries that need only other blocks still answer (``BackupDatabase``). For a
    /// block of a chain's page delta, `database` reads "the page delta of" and the path.
    case damagedBlock(name: String, database: String, block: Int, reason: String)
    /// A statement given to a backup's database would write (``BackupDatabase/query(_:)``
    /// runs read-only statements only); nothing ran from it on.
    case statementRefused(statement: String, reason: String)
    /// A diff, or the SQL that undoes one, was refused before anything was compared or
    /// written; `reason` says why (an unknown database or table, a table whose rows no key
    /// names).
    case diffRefused(reason: String)
    /// A failure from outside the library's vocabulary (a hook's own error type, say),
    /// carried as its description so that every public error is a ``StoreBackupError``.
    case unexpected(reason: String)

    /// `error` as a ``StoreBackupError``: itself when it is one, ``cancelled`` for a
    /// cancelled task, else ``unexpected(reason:)`` with its description.
    public static func wrapping(_ error: any Error) -> StoreBackupError {
        if let error = error as? StoreBackupError { return error }
        if error is CancellationError { return .cancelled }
        return .unexpected(reason: "\(error)")
    }

    /// What would help, when something specific would; ``description`` says it in the
    /// library's words, a front end in its own.
    public var remedy: Remedy? {
        switch self {
        case .backupNotFound: return .listBackups
        case .passwordRequired: return .givePassword
        case .unverifiableBackup: return .allowUnverified
        case .databaseDamagedAtSource: return .acceptDamagedDatabases
        case .newerFormat: return .upgradeStoreBackup
        case .outsideLink, .linkLoop: return .allowOutsideLinks
        case .backupHasDependents: return .deleteDependents
        case .reloadFailed(_, let rolledBack): return rolledBack ? nil : .recoverStore
        case .transfer(let failure): return failure.remedy
        case .invalidDestination(_, _, let remedy): return remedy
        case .storeInUse(_, let remedy): return remedy
        default: return nil
        }
    }

    /// One line for a person: what failed, then the ``remedy`` in the library's words.
    public var description: String {
        guard let remedy else { return summary }
        return "\(summary); \(remedy)"
    }

    /// One line for a person: what failed (and what to do where that needs no ``remedy``).
    public var summary: String {
        switch self {
        case .storesDirectoryMissing(let path):
            return "stores directory \(path) does not exist"
        case .storesDirectoryUnreadable(let path, let reason):
            return "cannot read stores directory \(path): \(reason)"
        case .noDatabases(let path):
            return "no SQLite database found in \(path) (looked for files starting with the SQLite header)"
        case .storeLocked(let path, let holder):
            return "\(path) is in use by another backup, restore or recovery (\(holder)); try again when it has finished"
        case .backupNotFound(let name, let destination):
            return "no backup named \"\(name)\" in \(destination)"
        case .backupExists(let name, let destination):
            return "a backup named \"\(name)\" already exists in \(destination); refusing to overwrite it"
        case .noBackups(let destination):
            return "there are no backups in \(destination)"
        case .invalidBackupName(let name):
            return "\"\(name)\" is not a backup name (backups are named \"<date> Stores.zip\")"
        case .corruptArchive(let name, let reason):
            return "backup \"\(name)\" is damaged: \(reason)"
        case .brokenChain(let name, let reason):
            return "backup \"\(name)\" is an incremental backup whose chain is broken: \(reason); nothing was restored"
        case .unsafeArchiveEntry(let name, let entry):
            return
                "backup \"\(name)\" contains an unsafe path \"\(entry)\" that would land outside the stores directory; refusing to restore it"
        case .unverifiableBackup(let name):
            return
                "backup \"\(name)\" has no manifest, so its files cannot be checked against checksums (it was not made by storebackup, or was altered); it is not verifiable"
        case .checksumMismatch(let name, let entry):
            return "backup \"\(name)\" is damaged: \(entry) does not match the checksum in its manifest"
        case .databaseCheckFailed(let path, let result):
            return "database \(path) failed its integrity check: \(result)"
        case .databaseDamagedAtSource(let name, let databases, let result):
            let list = databases.joined(separator: ", ")
            let verb = databases.count == 1 ? "was" : "were"
            // SQLite's answer can run to many lines; the message stays one, and short.
            let lines = result.split(whereSeparator: { $0.isNewline || $0 == ";" })
                .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("***") }
            let answer = lines.prefix(2).joined(separator: "; ") + (lines.count > 2 ? "; …" : "")
            return
                "backup \"\(name)\": \(list) \(verb) already damaged when the backup was made (it fails its integrity check: \(answer); its bytes match the checksum the backup recorded: it was already damaged in the live store)"
        case .databaseDamagedInStore(let path, let reason):
            return
                "database \(path) is damaged in the stores directory (SQLite: \(reason)); no backup was made: restore it from an earlier backup, or repair it (sqlite3 \"\(path)\" .recover)"
        case .newerFormat(let name, let format, let newestReadable):
            return
                "backup \"\(name)\" was made by a newer storebackup (format \(format)); this is storebackup \(StoreBackupVersion.current), which reads formats up to \(newestReadable)"
        case .verificationFailed(let backup, let problem):
            return "backup \"\(backup)\" failed its verification: \(problem)"
        case .sqlite(let path, let operation, let message):
            return "SQLite error on \(path) during \(operation): \(message)"
        case .archiveWrite(let reason):
            return "could not write the archive: \(reason)"
        case .io(let path, let operation, let code):
            return "\(operation) \(path): \(String(cString: strerror(code)))"
        case .destination(let destination, let reason):
            return "\(destination): \(reason)"
        case .transfer(let failure):
            return failure.message
        case .invalidDestination(let url, let reason, _):
            return "invalid destination \"\(url)\": \(reason)"
        case .reloadFailed(let reason, let rolledBack):
            return rolledBack
                ? "the restored store failed to load (\(reason)); the previous store was put back"
                : "the restored store failed to load (\(reason)) and the previous store could not be put back"
        case .restoreRefused(let reason):
            return reason
        case .storeInUse(let reason, _):
            return reason
        case .passwordUnavailable(let reason):
            return "no usable password: \(reason)"
        case .proofKeyUnusable(let path, let reason):
            return "proof key \(path) cannot be used: \(reason)"
        case .passwordRequired(let name):
            return "backup \"\(name)\" is encrypted"
        case .wrongPassword(let name):
            return "wrong password for backup \"\(name)\""
        case .invalidConfiguration(let problem):
            return problem.description
        case .invalidSchedule(let reason):
            return reason
        case .unknownStore(let name):
            return "no store named \"\(name)\" in the configuration"
        case .backupAlreadyRunning(let store):
            return "a backup of \"\(store)\" is already running"
        case .cancelled:
            return "cancelled; nothing was changed"
        case .notInBackup(let name, let paths):
            let list = paths.map { "\"\($0)\"" }.joined(separator: ", ")
            return "backup \"\(name)\" holds nothing at \(list) (see: storebackup ls \"\(name)\"); nothing was written"
        case .backupLocked(let name, let destination, let until):
            let when = until.map { "until " + UTCTimestamp.iso8601($0) } ?? "by a legal hold or a lock without a date"
            return "backup \"\(name)\" at \(destination) is locked \(when) (S3 Object Lock); it cannot be deleted before then"
        case .backupHasDependents(let name, let destination, let dependents):
            let shown = dependents.prefix(3).map { "\"\($0)\"" }.joined(separator: ", ")
            let more = dependents.count > 3 ? " and \(dependents.count - 3) more" : ""
            let count = dependents.count == 1 ? "1 incremental backup" : "\(dependents.count) incremental backups"
            return
                "backup \"\(name)\" at \(destination) is the base of \(count) (\(shown)\(more)), which cannot be restored without it; nothing was deleted"
        case .chainBaseChanged(let base, let destination, let problem):
            return
                "backup \"\(base)\" at \(destination), the newest of the chain, \(problem); the new point was not published, and the next backup will be a full one"
        case .extractRefused(let reason):
            return reason
        case .diffRefused(let reason):
            return reason
        case .unexpected(let reason):
            return reason
        case .outsideLink(let name, let link, let target):
            return
                "backup \"\(name)\" holds the link \(link) -> \(target), which points outside the stores directory (create warned about it); it was not restored"
        case .linkLoop(let name, let link, let target):
            return
                "backup \"\(name)\" holds the link \(link) -> \(target), which loops (it leads back through itself; create warned about it); it was not restored"
        case .notAFolder(let path, let what):
            return "\(path) is \(what), not a folder; give a folder, or a path that does not exist yet"
        case .damagedBlock(let name, let database, let block, let reason):
            return
                "block \(block) of \(database) in backup \"\(name)\" is damaged (\(reason)); the query that needs it was stopped, no row of it was shown"
        case .statementRefused(let statement, let reason):
            return "refused \"\(statement)\": \(reason)"
        }
    }
}
