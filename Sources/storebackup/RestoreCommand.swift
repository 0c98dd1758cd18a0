import ArgumentParser
import Foundation
import StoreBackup
import Synchronization

struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Replace a stores directory with a backup, verified first, with rollback.",
        discussion: """
            The backup is unpacked beside the store into <dir>_New while every checksum is checked \
            and every database passes PRAGMA integrity_check (skipped for a database whose proof, \
            made at create with your proof key or the backup's password, covers its bytes; \
            --check-databases runs it anyway); only then is the live directory moved \
            to <dir>_Old and the new one moved in. Each database is then opened and quick-checked; \
            if that fails, the new store goes to <dir>_FailedRestore and the old one is put back. \
            A restore killed at any point is repaired by the next command on the store (or `recover`). \
            The stores directory does not need to exist.

            --from may be given several times: the destinations are tried in that order, and one \
            that cannot be reached or lacks the backup is skipped with a warning ("latest" is \
            resolved at each); the command says which one it restores from.

            A store that another process has open is refused: that process would go on \
            writing into the replaced files. Stop the app first, or give --stop-command and \
            --start-command: the backup is then downloaded, unpacked and checked while the app \
            runs, the app is stopped only for the swap, and started again after it (also after \
            a rollback or a failure). A store of the configuration with this path takes its \
            stop-command, start-command, stop-timeout and keep-replaced from there.

            The store a restore replaces is kept beside it as <dir>_Replaced (renamed, not \
            copied) for 7 days (--keep-replaced), so `storebackup undo <dir>` can put it back; \
            the output prints that command. Only one is kept: the next restore drops it, and \
            so does the first command on the store once its time is up. It holds its disk \
            space meanwhile: it is not kept (a warning says so) when the next restore of a \
            store this size would no longer fit with the reserve kept free. --no-keep drops it \
            at once.
            """)

    @Argument(help: ArgumentHelp("The backup's name, or \"latest\" (left out with --at).", valueName: "name"))
    var givenName: String

    @Argument(help: ArgumentHelp("The stores directory to replace (or create).", valueName: "stores-dir"))
    var givenStoresDirectory: String?

    @OptionGroup var at: AtOption

    /// With --at the one argument is the stores directory.
    var storesDirectory: String { givenStoresDirectory ?? givenName }

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    @OptionGroup var proofKey: ProofKeyOption

    @Flag(
        help:
            "Run PRAGMA integrity_check on every database, also those whose proof says create checked the same bytes (their SHA-256 is checked either way)."
    )
    var checkDatabases = false

    @Flag(help: "Do not ask for confirmation (required when not on a terminal).")
    var yes = false

    @Flag(help: "Restore a backup that has no manifest (made by hand or by another tool), checking only CRCs and PRAGMA integrity_check.")
    var allowUnverified = false

    @Flag(
        help:
            "Make the links that point outside the stores directory (create warned about each and recorded them in the backup); other such links are still refused."
    )
    var allowOutsideLinks = false

    @Flag(
        help:
            "Restore a backup whose databases fail PRAGMA integrity_check although they match the backup's checksums: they were already damaged in the live store when the backup was made, and come back as they were then."
    )
    var acceptDamagedDatabases = false

    @OptionGroup var app: AppCommandOptions

    @Option(
        help: ArgumentHelp(
            "How long the replaced store is kept as <dir>_Replaced for `undo`, e.g. 12h, 7d, 2w (default 7d; 0: not kept).",
            valueName: "duration"))
    var keepReplaced: String?

    @Flag(help: "Do not keep the replaced store: it is removed at the commit, and the restore cannot be undone.")
    var noKeep = false

    @Flag(help: "Restore even if other processes have the store open (they lose what they write afterwards), with a warning naming them.")
    var force = false

    @Flag(
        help:
            "Print the result as JSON: {name, storesDirectory, files, databasesChecked, databasesProven, checkReasons, damagedDatabases, warning, app, undo ({command, path, size, keptUntil}, or null), keepWarning}."
    )
    var json = false

    @Flag(
        help: ArgumentHelp(
            "Build the new store from the live one: copy the files and 1 MiB database blocks whose SHA-256 already matches the backup's, read only the rest from the backup (from a remote, only those bytes). Backups before format 4 compare databases whole."
        ))
    var delta = false

    @OptionGroup var configurationFile: ConfigurationOption

    func validate() throws {
        if at.at != nil && givenStoresDirectory != nil { throw ValidationError("--at chooses the backup: give only the stores directory") }
        if at.at == nil && givenStoresDirectory == nil { throw ValidationError("Missing expected argument '<stores-dir>'") }
        try at.validate()
        if noKeep && keepReplaced != nil { throw ValidationError("--no-keep and --keep-replaced cannot be used together") }
        if let keepReplaced {
            do { _ = try DurationText.parseSeconds(keepReplaced) } catch { throw ValidationError("--keep-replaced: \(error)") }
        }
    }

    /// How long the replaced store is kept: --no-keep, --keep-replaced, the configured
    /// store's keep-replaced, or the default.
    func keepReplacedSeconds(configured: StoreJob?) -> Double {
        if noKeep { return 0 }
        if let keepReplaced, let seconds = try? DurationText.parseSeconds(keepReplaced) { return seconds }
        return configured?.keepReplaced ?? RestoreOptions.defaultKeepReplaced
    }

    func run() async throws {
        let name: String
        let source: any BackupDestination
        if let moment = at.date() {
            source = try destination.resolve()
            let repository = BackupRepository(destination: source, passwords: password.provider(confirm: false))
            name = await Terminal.runCancellable { try await repository.backup(at: moment).name }
            Terminal.info("storebackup: the newest backup made by \(at.at ?? ""): \"\(name)\"")
        } else if destination.destinations.count > 1 {
            let found = await Self.firstHolding(givenName, in: destination.connection.resolve(destination.destinations))
            source = found.destination
            name = found.backup.name
            Terminal.info("storebackup: restoring \"\(name)\" from \(source.displayName)")
        } else {
            source = try destination.resolve()
            name = givenName
        }
        let helper = StoreHelper(
            storesDirectory: storesDirectory, destination: source,
            passwords: password.provider(confirm: false), logger: Terminal.logger)
        let configured = configurationFile.configuredStore(helper.storesDirectory)
        let options = RestoreOptions(
            extraction: ExtractionOptions(
                allowUnverified: allowUnverified, allowOutsideLinks: allowOutsideLinks, acceptDamagedDatabases: acceptDamagedDatabases,
                proofKey: proofKey.keyForReading(), checkDatabases: checkDatabases),
            appCommands: app.appCommands(configured: configured?.appCommands), allowStoreInUse: force,
            keepReplaced: keepReplacedSeconds(configured: configured), delta: delta)
        if !yes {
            guard Terminal.standardInputIsTerminal else {
                Terminal.fail(
                    StoreBackupError.restoreRefused(
                        reason: "restore replaces \(helper.storesDirectory); pass --yes to confirm when not running on a terminal"))
            }
            guard Terminal.confirm("Replace \(helper.storesDirectory) with backup \"\(name)\"?") else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "restore not confirmed; nothing was changed"))
            }
        }
        let printer = ProgressPrinter.shared
        let hooks = Self.reloadHooks()
        let result = await Terminal.runCancellable {
            try await helper.restore(name, options: options, hooks: hooks, progress: printer.handler())
        }
        printer.finishLine()
        if let warning = result.warning { Terminal.info("storebackup: warning: \(warning)") }
        if !result.damagedDatabases.isEmpty {
            Terminal.info(
                "storebackup: warning: restored as they were when the backup was made, already damaged (they fail PRAGMA integrity_check): \(result.damagedDatabases.joined(separator: ", "))"
            )
        }
        Terminal.info(
            "storebackup: restored \"\(result.backupName)\" into \(result.storesDirectory) (\(result.fileCount) entries, \(result.databasesChecked.count) databases checked, \(result.databasesProven.count) proven)"
        )
        if let warning = result.keepWarning { Terminal.info("storebackup: warning: \(warning)") }
        let undo = result.replacedStore.map {
            UndoCommand.describe(
                $0, storesDirectory: result.storesDirectory, configuration: configurationFile.path, appCommandsGiven: app.stopCommand != nil
            )
        }
        if let undo { Terminal.info("storebackup: \(undo.text)") }
        if let delta = result.delta { Terminal.info("storebackup: \(Self.describe(delta))") }
        if json { try printJSON(result, undoCommand: undo?.command) }
        if let failure = result.appDowntime?.startFailure {
            Terminal.fail(StoreBackupError.restoreRefused(reason: "the store was restored, but \(failure); start the app"))
        }
    }

    private func printJSON(_ result: RestoreResult, undoCommand: String?) throws {
        var summary: [String: Any] = [
            "name": result.backupName, "storesDirectory": result.storesDirectory, "files": result.fileCount,
            "databasesChecked": result.databasesChecked, "damagedDatabases": result.damagedDatabases,
            "databasesProven": result.databasesProven, "checkReasons": result.checkReasons,
        ]
        if let warning = result.warning { summary["warning"] = warning }
        if let warning = result.storeInUseWarning { summary["storeInUseWarning"] = warning }
        if let warning = result.keepWarning { summary["keepWarning"] = warning }
        summary["undo"] =
            result.replacedStore.map { kept -> [String: Any] in
                var undo: [String: Any] = ["command": undoCommand ?? "", "path": kept.path, "size": kept.bytes]
                undo["keptUntil"] = kept.keptUntil.map { ISO8601DateFormatter().string(from: $0) }
                return undo
            } ?? NSNull()
        if let delta = result.delta {
            var fields: [String: Any] = ["used": delta.used]
            if let reason = delta.reason { fields["reason"] = reason }
            if delta.used {
                fields["bytesReused"] = delta.bytesReused
                fields["bytesRead"] = delta.bytesRead
                fields["filesReused"] = delta.filesReused
                fields["filesRead"] = delta.filesRead
                fields["blocksReused"] = delta.blocksReused
                fields["blocksRead"] = delta.blocksRead
            }
            if let downloaded = delta.bytesDownloaded { fields["bytesDownloaded"] = downloaded }
            summary["delta"] = fields
        }
        if let downtime = result.appDowntime { summary["app"] = downtime.jsonObject }
        let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
        Terminal.output(String(decoding: data, as: UTF8.self))
    }

    /// The line that says what --delta reused and read, or why it made a full restore.
    static func describe(_ delta: RestoreDelta) -> String {
        guard delta.used else { return "delta: not used, full restore (\(delta.reason ?? "no reason given"))" }
        var line =
            "delta: reused \(ByteCountText.describe(delta.bytesReused)) from the live store (\(delta.filesReused) files, \(delta.blocksReused) database blocks), read \(ByteCountText.describe(delta.bytesRead)) from the backup (\(delta.filesRead) files, \(delta.blocksRead) database blocks)"
        if let downloaded = delta.bytesDownloaded { line += ", \(ByteCountText.describe(downloaded)) downloaded" }
        return line
    }

    /// With several --from: the first destination, in the order given, that answers and
    /// holds the backup (`latest` is resolved at each). Ends the command when none does.
    static func firstHolding(_ nameOrLatest: String, in destinations: [any BackupDestination]) async
        -> (destination: any BackupDestination, backup: BackupListing)
    {
        do {
            return try await StoreHelper.firstHolding(nameOrLatest, in: destinations) { destination, reason in
                Terminal.info("storebackup: warning: \(destination): \(ErrorAdvice.describe(reason)); trying the next --from")
            }
        } catch {
            Terminal.fail(error)
        }
    }

    /// The command line reloads by quick-checking every database. Tests can make the
    /// reload of a restored store fail (STOREBACKUP_TEST_FAIL_RELOAD=1) to exercise rollback.
    static func reloadHooks() -> ReloadHooks {
        guard ProcessInfo.processInfo.environment["STOREBACKUP_TEST_FAIL_RELOAD"] == "1" else { return .checkDatabases }
        let attempts = ReloadAttempts()
        return ReloadHooks(reload: { directory in
            if attempts.next() == 1 { throw StoreBackupError.restoreRefused(reason: "reload rejected by STOREBACKUP_TEST_FAIL_RELOAD") }
            try DatabaseCheck.quickCheckAll(in: directory)
        })
    }
}

/// Counts reload calls so only the first (on the restored store) fails.
final class ReloadAttempts: Sendable {
    private let count = Mutex(0)
    func next() -> Int {
        count.withLock { count in
            count += 1
            return count
        }
    }
}
