import ArgumentParser
import Foundation
import StoreBackup

extension CreateCommand {
    /// The backup made for one destination: its name on stdout, what it is on stderr (or
    /// everything in --json).
    func printBackup(_ result: BackupResult, usage: StoreUsage?) throws {
        if json {
            var summary: [String: Any] = [
                "name": result.name, "encrypted": encrypt, "size": result.size, "destination": result.destination,
                "files": result.fileCount, "databases": result.databases,
                "archiveSeconds": result.archiveSeconds, "uploadSeconds": result.uploadSeconds,
                "outsideLinks": result.outsideLinks, "leftOut": result.leftOut, "leftOutCount": result.leftOut.count,
                "warnings": result.warnings, "kind": result.kind,
            ]
            if let base = result.base { summary["base"] = base }
            if let reason = result.fullReason { summary["fullReason"] = reason }
            if let usage {
                summary["openBy"] = usage.users.map { ["file": $0.file, "pid": Int($0.pid), "command": $0.command] as [String: Any] }
                if !usage.blindSpots.isEmpty { summary["openByUnseen"] = usage.blindSpots }
            }
            let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
            Terminal.output(String(decoding: data, as: UTF8.self))
        } else {
            // With --incremental, why this one is a full (a broken chain, a damaged state, the policy).
            if let reason = result.fullReason { Terminal.info("storebackup: a full backup: \(reason)") }
            Terminal.info("storebackup: created \"\(result.name)\" (\(Terminal.formatBytes(result.size))) in \(result.destination)")
            Terminal.output(result.name)
        }
    }

    /// `create DIR --to A --to B …`: each destination's outcome on its own line (or in
    /// --json), exit status 1 if any failed.
    func printOutcomes(_ outcomes: [PublishOutcome]) throws {
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
                summary["files"] = first.fileCount
                summary["databases"] = first.databases
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
