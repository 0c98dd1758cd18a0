import ArgumentParser
import Foundation
import Logging
import StoreBackup

extension VerifyCommand {
    /// `verify --store NAME`: one restore drill of a configured store, as `run` makes it on
    /// the drill's schedule (state file, metrics, on-failure hooks).
    func runDrill(_ storeName: String) async throws {
        let configuration = configurationFile.load()
        metrics.start(configured: configuration.metricsFile)
        guard let job = configuration.stores.first(where: { $0.name == storeName }) else {
            Terminal.fail(StoreBackupError.unknownStore(name: storeName))
        }
        var options = configuration.destinationOptions()
        if destination.caFile != nil || destination.insecure { options.transport = destination.options.transport }
        let logger = Logger(label: "storebackup") { _ in StreamLogHandler.standardError(label: "storebackup") }
        let service = BackupService(jobs: [job], stateStore: configuration.stateStore, destinationOptions: options, logger: logger)
        let outcome = await Terminal.runCancellable { try await service.verifyNow(storeName) }
        if let error = outcome.error { Terminal.fail(error) }
        try Self.print(outcome.results, json: json)
        if !outcome.succeeded { throw ExitCode(1) }
    }
}
