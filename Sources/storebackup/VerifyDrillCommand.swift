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
        let several = outcome.destinations.count > 1
        if json {
            // One object per backup verified (with its destination), and one per destination
            // where nothing could be verified.
            let encoder = JSONEncoder()
            var rows: [[String: Any]] = []
            for place in outcome.destinations {
                for result in place.results {
                    var row = try JSONSerialization.jsonObject(with: encoder.encode(result)) as? [String: Any] ?? [:]
                    row["destination"] = place.destination
                    rows.append(row)
                }
                if let error = place.error {
                    rows.append(["destination": place.destination, "ok": false, "problem": Self.describe(error)])
                }
            }
            let data = try JSONSerialization.data(withJSONObject: rows, options: [.prettyPrinted, .sortedKeys])
            Terminal.output(String(decoding: data, as: UTF8.self))
        } else {
            if let only = outcome.destinations.first, !several, let error = only.error { Terminal.fail(error) }
            for place in outcome.destinations {
                if several { Terminal.output("at \(place.destination):") }
                try Self.print(place.results, json: false)
                if let error = place.error { Terminal.info("storebackup: error: \(Self.describe(error))") }
            }
        }
        if !outcome.succeeded { throw ExitCode(1) }
    }

    static func describe(_ error: any Error) -> String {
        (error as? StoreBackupError)?.description ?? "\(error)"
    }
}
