import ArgumentParser
import Foundation
import StoreBackup

struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Replace a stores directory with a backup, verified first, with rollback.",
        discussion: """
            The backup is unpacked beside the store into <dir>_New while every checksum is checked \
            and every database passes PRAGMA integrity_check; only then is the live directory moved \
            to <dir>_Old and the new one moved in. Each database is then opened and quick-checked; \
            if that fails, the new store goes to <dir>_FailedRestore and the old one is put back. \
            A restore killed at any point is repaired by the next command on the store (or `recover`). \
            The stores directory does not need to exist.

            --from may be given several times: the destinations are tried in that order, and one \
            that cannot be reached or lacks the backup is skipped with a warning ("latest" is \
            resolved at each); the command says which one it restores from.
            """)

    @Argument(help: ArgumentHelp("The backup's name, or \"latest\".", valueName: "name"))
    var name: String

    @Argument(help: ArgumentHelp("The stores directory to replace (or create).", valueName: "stores-dir"))
    var storesDirectory: String

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    @Flag(help: "Do not ask for confirmation (required when not on a terminal).")
    var yes = false

    @Flag(help: "Restore a backup that has no manifest (made by hand or by another tool), checking only CRCs and PRAGMA integrity_check.")
    var allowUnverified = false

    @Flag(help: "Make the links that point outside the stores directory (create warned about each and recorded them in the backup); other such links are still refused.")
    var allowOutsideLinks = false

    func run() async throws {
        let name: String
        let source: any BackupDestination
        if destination.destinations.count > 1 {
            let found = await Self.firstHolding(self.name, in: destination.connection.resolve(destination.destinations))
            source = found.destination
            name = found.backup.name
            Terminal.info("storebackup: restoring \"\(name)\" from \(source.displayName)")
        } else {
            source = try destination.resolve()
            name = self.name
        }
        var configured = StoreHelper(storesDirectory: storesDirectory, destination: source,
                                     passwords: password.provider(confirm: false), logger: Terminal.logger)
        configured.allowUnverified = allowUnverified
        configured.allowOutsideLinks = allowOutsideLinks
        let helper = configured
        if !yes {
            guard Terminal.standardInputIsTerminal else {
                Terminal.fail(StoreBackupError.restoreRefused(
                    reason: "restore replaces \(helper.storesDirectory); pass --yes to confirm when not running on a terminal"))
            }
            guard Terminal.confirm("Replace \(helper.storesDirectory) with backup \"\(name)\"?") else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "restore not confirmed; nothing was changed"))
            }
        }
        let printer = ProgressPrinter.shared
        let hooks = Self.reloadHooks()
        let result = await Terminal.runCancellable {
            try await helper.restore(name, hooks: hooks, progress: printer.handler())
        }
        printer.finishLine()
        if let warning = result.warning { Terminal.info("storebackup: warning: \(warning)") }
        Terminal.info("storebackup: restored \"\(result.backupName)\" into \(result.storesDirectory) (\(result.fileCount) entries, \(result.databasesChecked.count) databases checked)")
    }

    /// With several --from: the first destination, in the order given, that answers and
    /// holds the backup (`latest` is resolved at each). Ends the command when none does.
    static func firstHolding(_ nameOrLatest: String, in destinations: [any BackupDestination]) async
        -> (destination: any BackupDestination, backup: BackupListing) {
        var reasons: [String] = []
        for destination in destinations {
            do {
                let backup = try await destination.resolve(nameOrLatest)
                return (destination, backup)
            } catch let error as StoreBackupError where error == .invalidBackupName(name: nameOrLatest) {
                Terminal.fail(error)
            } catch {
                Terminal.info("storebackup: warning: \(destination.displayName): \(ErrorAdvice.describe(error)); trying the next --from")
                reasons.append(ErrorAdvice.describe(error))
            }
        }
        Terminal.fail(StoreBackupError.restoreRefused(
            reason: "no --from destination could provide \"\(nameOrLatest)\" (\(reasons.joined(separator: "; "))); nothing was changed"))
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
// Unchecked: `count` is used only while `lock` is held.
final class ReloadAttempts: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func next() -> Int { lock.withLock { count += 1; return count } }
}
