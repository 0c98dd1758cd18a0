import ArgumentParser
import Foundation
import Logging
import StoreBackup

extension CreateCommand {
    /// `create --store NAME` / `create DIR --prune`: one run of a configured store, exactly as
    /// `run` would do it (state file, retention when --prune, hooks), for cron and timers.
    func runConfigured() async throws {
        let configuration = configurationFile.load()
        metrics.start(configured: configuration.metricsFile)
        let job: StoreJob
        if let store {
            guard let match = configuration.stores.first(where: { $0.name == store }) else {
                Terminal.fail(StoreBackupError.unknownStore(name: store))
            }
            if let storesDirectory, Self.normalized(storesDirectory) != match.storesDirectory {
                throw ValidationError("store \"\(store)\" is \(match.storesDirectory), not \(storesDirectory)")
            }
            job = match
        } else {
            let path = Self.normalized(storesDirectory ?? ".")
            guard let match = configuration.stores.first(where: { $0.storesDirectory == path }) else {
                Terminal.fail(
                    StoreBackupError.invalidConfiguration(
                        ConfigurationProblem(
                            file: configuration.file ?? configurationFile.effectivePath, line: nil, key: "stores",
                            message: "no store with path \(path); --prune takes its retention from there")))
            }
            job = match
        }
        var adjusted = job
        if !prune { adjusted.retention = nil }
        if let explicit = destination.destinations.first {
            adjusted.destination = explicit
            adjusted.mirrors = Array(destination.destinations.dropFirst())
        }
        if level != "default", let parsed = CompressionLevel.parse(level) { adjusted.compressionLevel = parsed }
        if let threads { adjusted.threads = threads }
        if let policy = try incrementalPolicy() { adjusted.incremental = policy }
        if encrypt {
            // The configured path reads the password from a file (no prompt: it is for cron and timers).
            guard let file = password.passwordFile ?? job.passwordFile else {
                throw ValidationError(
                    "--encrypt with --store or --prune needs --password-file FILE (or encrypt.password-file in the configuration)")
            }
            adjusted.passwordFile = file
        }
        if prune && adjusted.retention == nil {
            Terminal.info(
                "storebackup: warning: store \"\(job.name)\" has no retention in \(configurationFile.effectivePath); nothing will be pruned"
            )
        }
        var options = configuration.destinationOptions()
        if destination.caFile != nil || destination.insecure { options.transport = destination.options.transport }
        destination.connection.applyLimits(to: &options)
        let logger = Logger(label: "storebackup") { _ in StreamLogHandler.standardError(label: "storebackup") }
        let service = BackupService(jobs: [adjusted], stateStore: configuration.stateStore, destinationOptions: options, logger: logger)
        let storeName = adjusted.name
        let outcome = await Terminal.runCancellable { try await service.backUpNow(storeName) }
        guard let result = outcome.backup else { return }
        if json {
            var summary: [String: Any] = [
                "name": result.name, "encrypted": adjusted.passwordFile != nil, "size": result.size, "destination": result.destination,
                "files": result.fileCount, "databases": result.databases, "pruned": outcome.pruned,
                "kind": result.kind,
            ]
            if let base = result.base { summary["base"] = base }
            let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
            Terminal.output(String(decoding: data, as: UTF8.self))
        } else {
            Terminal.output(result.name)
        }
    }

    /// A path as the library stores it (absolute, standardized).
    static func normalized(_ path: String) -> String {
        StoreHelper.absolutePath(path)
    }
}
