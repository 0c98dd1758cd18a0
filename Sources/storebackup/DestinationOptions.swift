import ArgumentParser
import StoreBackup

/// Shared by commands that read or write backups.
struct DestinationOption: ParsableArguments {
    @Option(name: [.customLong("to"), .customLong("from")],
            help: ArgumentHelp("Where backups live: a folder path or file:// URL.", valueName: "destination"))
    var destination: String?

    func resolve() throws -> any BackupDestination {
        do { return try DestinationResolver.resolve(destination) } catch { Terminal.fail(error) }
    }
}
