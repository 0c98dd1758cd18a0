import ArgumentParser
import Foundation
import StoreBackup

struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List backups (\"… Stores.zip\"), newest first, with the host that made each.",
        discussion: """
            The host comes from each backup's manifest. In a local folder it is read from the \
            archive; for a remote destination only known hosts are shown (backups this machine \
            made, and those `prune` has read once), never downloading anything; others show "?".

            Each backup is a full or an incremental one (whose name says the date of its base, \
            "<date> incremental on <base date> Stores.zip"). An incremental whose base, or a \
            base further down its chain, is not at the destination cannot be restored: it is \
            marked "base missing".

            With levels of restore points (`levels:` in the configuration, docs/levels.md), \
            --levels shows each backup's level (minute, hourly, daily, full: read from the \
            chain's names) and, at the end, the span of time each level covers.
            """)

    @OptionGroup var destination: DestinationOption

    @Option(help: ArgumentHelp("Only backups made by this host (see the host column).", valueName: "name"))
    var host: String?

    @Flag(
        help:
            "Print JSON: an array of {name, size, date, modified, host, storesDirectory, encrypted, dated, kind, level, base, chainBroken, missingBase} (host null when not known; encrypted only for local folders; kind \"full\" or \"incremental\"; level \"minute\", \"hourly\", \"daily\" or \"full\"; base the base's name, null for a full or a missing base; missingBase only for a broken chain)."
    )
    var json = false

    @Flag(help: "Show each backup's level (minute, hourly, daily, full) and the span each level covers (docs/levels.md).")
    var levels = false

    func run() async throws {
        let target = try destination.resolve()
        let repository = BackupRepository(destination: target)
        var backups = await Terminal.runCancellable { try await repository.list() }
        // Chains are read from every backup's name, before --host narrows what is shown.
        let chains = BackupChains(backups)
        let levelOf = PointLevels(chains)
        let index = BackupOriginIndex(destination: target, cacheDirectory: BackupStateStore.defaultDirectory())
        let origins = await index.origins(of: backups, download: false)
        if let host {
            let unknown = backups.filter { (origins[$0.name] ?? nil) == nil }.count
            backups = backups.filter { (origins[$0.name] ?? nil)?.host == host }
            if unknown > 0 {
                Terminal.info(
                    "storebackup: \(unknown) backups of unknown host left out (remote and not read yet: `storebackup prune --dry-run --all-hosts` reads them once)"
                )
            }
        }
        // Encryption is read from each archive's central directory, cheap for a local folder.
        // Remote backups would need a download, so it is left unknown there (see docs/encryption.md).
        let encrypted: [String: Bool] = Dictionary(
            uniqueKeysWithValues: backups.compactMap { backup in
                guard let path = target.localPath(of: backup.name),
                    let flag = BackupInspection.isEncrypted(archiveAt: path)
                else { return nil }
                return (backup.name, flag)
            })
        if json {
            let formatter = ISO8601DateFormatter()
            let rows: [[String: Any]] = backups.map { backup in
                var row: [String: Any] = ["name": backup.name, "size": backup.size, "date": formatter.string(from: backup.date)]
                if let modified = backup.modified { row["modified"] = formatter.string(from: modified) }
                if let flag = encrypted[backup.name] { row["encrypted"] = flag }
                row["dated"] = backup.hasDateInName
                let origin = origins[backup.name] ?? nil
                row["host"] = origin?.host ?? NSNull()
                row["storesDirectory"] = origin?.storesDirectory ?? NSNull()
                row["kind"] = chains.isIncremental(backup.name) ? "incremental" : "full"
                row["level"] = levelOf.level(of: backup.name)?.rawValue ?? NSNull()
                row["base"] = chains.base(of: backup.name) ?? NSNull()
                let missing = chains.missingBase(of: backup.name)
                row["chainBroken"] = missing != nil
                if let missing { row["missingBase"] = missing }
                return row
            }
            let data = try JSONSerialization.data(withJSONObject: rows, options: [.sortedKeys, .prettyPrinted])
            Terminal.output(String(decoding: data, as: UTF8.self))
            return
        }
        guard !backups.isEmpty else {
            Terminal.info(host.map { "no backups of host \($0) in \(target.displayName)" } ?? "no backups in \(target.displayName)")
            return
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss zzz"
        let hostWidth = max(4, backups.map { ((origins[$0.name] ?? nil)?.host ?? "?").count }.max() ?? 0)
        for backup in backups {
            let size = Terminal.formatBytes(backup.size).padding(toLength: 10, withPad: " ", startingAt: 0)
            let hostName = ((origins[backup.name] ?? nil)?.host ?? "?").padding(toLength: hostWidth, withPad: " ", startingAt: 0)
            let lock = encrypted[backup.name] == true ? "encrypted" : "         "
            let kind = chains.isIncremental(backup.name) ? "incremental" : "full       "
            // An undated name shows its upload time, marked: it is never `latest`.
            let undated = backup.hasDateInName ? "" : "  (no date in name: restore it by name)"
            let broken =
                chains.missingBase(of: backup.name).map { "  (base missing: no backup of \($0) here; it cannot be restored)" } ?? ""
            let levelName = levelOf.level(of: backup.name)?.rawValue ?? "?"
            let level = levels ? levelName.padding(toLength: 8, withPad: " ", startingAt: 0) + "  " : ""
            Terminal.output(
                "\(formatter.string(from: backup.date))  \(size)  \(hostName)  \(lock)  \(level)\(kind)  \(backup.name)\(undated)\(broken)")
        }
        if levels { printSpans(backups, levels: levelOf, formatter: formatter) }
    }

    /// Per level, how many backups and the time from its oldest to its newest.
    private func printSpans(_ backups: [BackupListing], levels: PointLevels, formatter: DateFormatter) {
        Terminal.output("")
        for level in PointLevel.allCases {
            let dates = backups.filter { levels.level(of: $0.name) == level }.map(\.date)
            guard let oldest = dates.min(), let newest = dates.max() else { continue }
            Terminal.output(
                "\(level.rawValue): \(dates.count) backups, \(formatter.string(from: oldest)) to \(formatter.string(from: newest))")
        }
    }
}
