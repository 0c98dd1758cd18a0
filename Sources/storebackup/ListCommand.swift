import ArgumentParser
import Foundation
import StoreBackup

struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List backups (\"… Stores.zip\"), newest first.")

    @OptionGroup var destination: DestinationOption

    @Flag(help: "Print JSON: an array of {name, size, date, modified, encrypted}.")
    var json = false

    func run() async throws {
        let target = try destination.resolve()
        let backups = await Terminal.runCancellable { try await target.sortedBackups() }
        // Encryption is read from each archive's central directory, cheap for a local folder.
        // Remote backups would need a download, so it is left unknown there (see README).
        let local = target as? LocalFolderDestination
        let encrypted: [String: Bool] = Dictionary(uniqueKeysWithValues: backups.compactMap { backup in
            guard let path = local?.localPath(of: backup.name),
                  let flag = BackupInspection.isEncrypted(archiveAt: path) else { return nil }
            return (backup.name, flag)
        })
        if json {
            let formatter = ISO8601DateFormatter()
            let rows: [[String: Any]] = backups.map { backup in
                var row: [String: Any] = ["name": backup.name, "size": backup.size, "date": formatter.string(from: backup.date)]
                if let modified = backup.modified { row["modified"] = formatter.string(from: modified) }
                if let flag = encrypted[backup.name] { row["encrypted"] = flag }
                return row
            }
            let data = try JSONSerialization.data(withJSONObject: rows, options: [.sortedKeys, .prettyPrinted])
            Terminal.output(String(decoding: data, as: UTF8.self))
            return
        }
        guard !backups.isEmpty else {
            Terminal.info("no backups in \(target.displayName)")
            return
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss zzz"
        for backup in backups {
            let size = Terminal.formatBytes(backup.size).padding(toLength: 10, withPad: " ", startingAt: 0)
            let lock = encrypted[backup.name] == true ? "encrypted" : "         "
            Terminal.output("\(formatter.string(from: backup.date))  \(size)  \(lock)  \(backup.name)")
        }
    }
}
