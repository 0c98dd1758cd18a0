import ArgumentParser
import StoreBackup

struct DeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete one backup.")

    @Argument(help: ArgumentHelp("The backup's exact name (see `storebackup list`).", valueName: "name"))
    var name: String

    @OptionGroup var destination: DestinationOption

    @Flag(help: "Do not ask for confirmation (required when not on a terminal).")
    var yes = false

    func run() async throws {
        let target = try destination.resolve()
        let backup = await Terminal.runCancellable { try await target.resolve(name) }
        if !yes {
            guard Terminal.standardInputIsTerminal else {
                Terminal.fail(
                    StoreBackupError.restoreRefused(reason: "pass --yes to delete \"\(backup.name)\" when not running on a terminal"))
            }
            guard Terminal.confirm("Delete backup \"\(backup.name)\" from \(target.displayName)?") else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "not confirmed; nothing was deleted"))
            }
        }
        await Terminal.runCancellable { try await target.delete(backup.name) }
        Terminal.info("storebackup: deleted \"\(backup.name)\" from \(target.displayName)")
    }
}
