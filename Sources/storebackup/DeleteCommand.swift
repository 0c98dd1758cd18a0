import ArgumentParser
import StoreBackup

struct DeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete one backup.",
        discussion: """
            A backup that incremental backups depend on (their base) is refused, naming them: \
            they could not be restored without it. --with-dependents deletes them too, newest \
            first, then the backup.
            """)

    @Argument(help: ArgumentHelp("The backup's exact name (see `storebackup list`).", valueName: "name"))
    var name: String

    @OptionGroup var destination: DestinationOption

    @Flag(help: "Also delete the incremental backups that depend on it (newest first).")
    var withDependents = false

    @Flag(help: "Do not ask for confirmation (required when not on a terminal).")
    var yes = false

    func run() async throws {
        let target = try destination.resolve()
        let backups = BackupRepository(destination: target)
        let name = self.name, withDependents = self.withDependents
        let doomed = await Terminal.runCancellable { try await backups.deletion(of: name, withDependents: withDependents) }
        let backup = doomed.last!
        let what =
            doomed.count == 1
            ? "backup \"\(backup)\"" : "backup \"\(backup)\" and the \(doomed.count - 1) incremental backups that depend on it"
        if !yes {
            guard Terminal.standardInputIsTerminal else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "pass --yes to delete \(what) when not running on a terminal"))
            }
            for dependent in doomed.dropLast() { Terminal.info("  \(dependent)") }
            guard Terminal.confirm("Delete \(what) from \(target.displayName)?") else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "not confirmed; nothing was deleted"))
            }
        }
        // Newest first, as planned: stopping at a failure leaves no incremental without its base.
        let place = target.displayName
        await Terminal.runCancellable {
            try await backups.delete(planned: doomed) { deleted in Terminal.info("storebackup: deleted \"\(deleted)\" from \(place)") }
        }
    }
}
