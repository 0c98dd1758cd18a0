import ArgumentParser
import Foundation
import StoreBackup

extension CreateCommand {
    /// `create DIR --to A --to B …`: one archive, published to every destination at once;
    /// each destination's outcome on its own line (or in --json), exit status 1 if any failed.
    func runMirrored(_ storesDirectory: String, passwords: PasswordProvider?) async throws {
        let targets = destination.connection.resolve(destination.destinations.map { Optional($0) })
        var configured = StoreHelper(
            storesDirectory: storesDirectory, destination: targets[0],
            compressionLevel: CompressionLevel.parse(level)!, encrypt: encrypt, passwords: passwords, logger: Terminal.logger)
        configured.threads = threads
        configured.incremental = try incrementalPolicy()
        let helper = configured
        let printer = ProgressPrinter.shared
        let outcomes = await Terminal.runCancellable {
            try await helper.createBackup(alsoTo: Array(targets.dropFirst()), progress: printer.handler())
        }
        printer.finishLine()
        let failed = outcomes.filter { !$0.succeeded }
        if json {
            let rows: [[String: Any]] = outcomes.map { outcome in
                var row: [String: Any] = ["destination": outcome.destination, "status": outcome.succeeded ? "published" : "failed"]
                if let backup = outcome.backup {
                    row["name"] = backup.name
                    row["size"] = backup.size
                    row["uploadSeconds"] = backup.uploadSeconds
                }
                if let error = outcome.error { row["error"] = Self.describe(error) }
                return row
            }
            var summary: [String: Any] = ["encrypted": encrypt, "destinations": rows, "failed": failed.count]
            if let first = outcomes.compactMap(\.backup).first {
                summary["name"] = first.name
                summary["size"] = first.size
                summary["files"] = first.manifest.files.count
                summary["databases"] = first.manifest.databases.map(\.path)
                summary["archiveSeconds"] = first.archiveSeconds
                summary["kind"] = first.kind
                if let base = first.base { summary["base"] = base }
                if let reason = first.fullReason { summary["fullReason"] = reason }
            }
            let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
            Terminal.output(String(decoding: data, as: UTF8.self))
        } else {
            for outcome in outcomes {
                if let backup = outcome.backup {
                    Terminal.info(
                        "storebackup: published \"\(backup.name)\" (\(Terminal.formatBytes(backup.size))) to \(outcome.destination)")
                } else {
                    Terminal.info(
                        "storebackup: FAILED to publish to \(outcome.destination): \(Self.describe(outcome.error ?? StoreBackupError.cancelled))"
                    )
                }
            }
            if let first = outcomes.compactMap(\.backup).first {
                if let reason = first.fullReason { Terminal.info("storebackup: a full backup: \(reason)") }
                Terminal.output(first.name)
            }
        }
        if !failed.isEmpty {
            Terminal.info(
                "storebackup: error: the backup was not published to \(failed.count) of \(outcomes.count) destinations: "
                    + failed.map(\.destination).joined(separator: ", "))
            throw ExitCode(1)
        }
    }

    /// An error as one line, the library's own words for its errors.
    static func describe(_ error: any Error) -> String {
        (error as? StoreBackupError)?.description ?? "\(error)"
    }
}
