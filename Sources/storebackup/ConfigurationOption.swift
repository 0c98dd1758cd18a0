import ArgumentParser
import Foundation
import StoreBackup

/// `--config FILE`, shared by the commands that read the YAML configuration.
struct ConfigurationOption: ParsableArguments {
    @Option(
        name: .customLong("config"),
        help: ArgumentHelp("The YAML configuration (default \(BackupConfiguration.defaultPath)).", valueName: "file"))
    var path: String?

    var effectivePath: String { path ?? BackupConfiguration.defaultPath }

    /// The configuration; a missing or invalid file ends the command with a located error.
    func load() -> BackupConfiguration {
        do { return try BackupConfiguration.load(path: effectivePath) } catch { Terminal.fail(error) }
    }

    /// The configuration when one was named or the default file exists; nil otherwise.
    func loadIfPresent() -> BackupConfiguration? {
        guard path != nil || FileManager.default.fileExists(atPath: BackupConfiguration.defaultPath) else { return nil }
        return load()
    }
}
