import ArgumentParser
import Foundation
import StoreBackup

struct PruneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Delete old backups by a retention policy (restic's --keep-* rules), saying what is kept and why.",
        discussion: """
            Backups are dated by the date in their name (the modification time where the name has \
            none) and grouped by origin, the host and stores directory in each backup's manifest; \
            each group is pruned on its own, so one machine or store never pushes out another's \
            backups. Only this host's groups are considered unless --host or --all-hosts says \
            otherwise; backups whose manifest cannot be read are never deleted.

            Rules (as restic forget): --keep-last N keeps the N newest; --keep-hourly/daily/weekly/ \
            monthly/yearly N keeps the newest backup of each of the last N hours/days/ISO weeks/months/ \
            years that have one; --keep-within SPAN (e.g. 1y5m7d2h, m = months) keeps everything \
            newer than SPAN before the newest backup. A backup is kept if any rule keeps it; the \
            newest is always kept. Periods are in local time.

            Incremental backups need their base: a backup that a kept backup depends on (its \
            chain down to the full) is always kept, shown as "base of <name>".

            --levels keeps restore points by level (docs/levels.md): every point made within 24 \
            hours of the newest backup, each hour's point within 7 days, each day's point and \
            every full within 35 days (a store's `levels:` sets other spans). Levels are read \
            from the chain's names, in UTC.

            Without --keep-* flags, each store of the configuration is pruned by its `retention`. \
            Deleting asks for confirmation on a terminal and needs --yes otherwise; --dry-run only prints.
            """)

    @OptionGroup var destination: DestinationOption
    @OptionGroup var configurationFile: ConfigurationOption
    @OptionGroup var password: PasswordOption
    @OptionGroup var metrics: MetricsFileOption

    @Option(help: ArgumentHelp("With the configuration: prune only this store.", valueName: "name"))
    var store: String?

    @Option(help: ArgumentHelp("Prune this host's backups (default: this machine).", valueName: "name"))
    var host: String?

    @Flag(help: "Prune every host's backups (each host and store separately).")
    var allHosts = false

    @Option(name: .customLong("keep-last"), help: "Keep the N newest backups.") var keepLast: Int?
    @Option(name: .customLong("keep-hourly"), help: "Keep the newest backup of each of the last N hours that have one.") var keepHourly:
        Int?
    @Option(name: .customLong("keep-daily"), help: "Keep the newest backup of each of the last N days that have one.") var keepDaily: Int?
    @Option(name: .customLong("keep-weekly"), help: "Keep the newest backup of each of the last N ISO weeks that have one.") var keepWeekly:
        Int?
    @Option(name: .customLong("keep-monthly"), help: "Keep the newest backup of each of the last N months that have one.") var keepMonthly:
        Int?
    @Option(name: .customLong("keep-yearly"), help: "Keep the newest backup of each of the last N years that have one.") var keepYearly:
        Int?
    @Option(
        name: .customLong("keep-within"),
        help: ArgumentHelp("Keep backups newer than SPAN before the newest (e.g. 30d, 1y6m, 12h).", valueName: "span"))
    var keepWithin: String?

    @Flag(help: "Keep restore points by level: all for 24 h, hourly for 7 days, daily and fulls for 35 days.")
    var levels = false

    @Flag(help: "Print what would be kept and deleted; delete nothing.")
    var dryRun = false

    @Flag(help: "Do not ask for confirmation (required when not on a terminal).")
    var yes = false

    @Flag(help: "Print JSON: an array of groups {host, storesDirectory, destination, backups: [{name, date, keep, reasons}]}.")
    var json = false

    var flagPolicy: RetentionPolicy? {
        get throws {
            var policy = RetentionPolicy(
                keepLast: keepLast ?? 0, keepHourly: keepHourly ?? 0, keepDaily: keepDaily ?? 0, keepWeekly: keepWeekly ?? 0,
                keepMonthly: keepMonthly ?? 0, keepYearly: keepYearly ?? 0)
            if let keepWithin {
                do { policy.keepWithin = try RetentionSpan.parse(keepWithin) } catch { throw ValidationError("--keep-within: \(error)") }
            }
            if levels { policy.levels = PointLevelPolicy() }
            return policy.isEmpty ? nil : policy
        }
    }

    func validate() throws {
        for (name, value) in [
            ("keep-last", keepLast), ("keep-hourly", keepHourly), ("keep-daily", keepDaily), ("keep-weekly", keepWeekly),
            ("keep-monthly", keepMonthly), ("keep-yearly", keepYearly),
        ] {
            if let value, value < 0 { throw ValidationError("--\(name) must be 0 or more") }
        }
        _ = try flagPolicy
        if allHosts && host != nil { throw ValidationError("give --host or --all-hosts, not both") }
        if try flagPolicy != nil && store != nil {
            throw ValidationError("--store picks a configured retention; do not combine it with --keep-* flags")
        }
    }

    /// One destination pruned by one policy, over the origins it selects.
    struct Target {
        var destination: any BackupDestination
        var policy: RetentionPolicy
        var storesDirectory: String?
        var stateDirectory: String
        /// Opens encrypted backups to read their origin; without it they are kept.
        var passwords: PasswordProvider?
    }

    func run() async throws {
        let hostFilter: String? = allHosts ? nil : (host ?? BackupOrigin.currentHost)
        var targets: [Target] = []
        if let policy = try flagPolicy {
            let configuration = configurationFile.path == nil ? nil : configurationFile.load()
            metrics.start(configured: configuration?.metricsFile)
            let stateDirectory = configuration?.stateStore.directory ?? BackupStateStore.defaultDirectory()
            targets.append(
                Target(
                    destination: try destination.resolve(), policy: policy, storesDirectory: nil, stateDirectory: stateDirectory,
                    passwords: password.provider(confirm: false, prompt: false)))
        } else {
            guard configurationFile.path != nil || FileManager.default.fileExists(atPath: BackupConfiguration.defaultPath) else {
                Terminal.fail(
                    StoreBackupError.invalidConfiguration(
                        ConfigurationProblem(
                            file: BackupConfiguration.defaultPath, line: nil, key: nil,
                            message: "no --keep-* flags and no configuration: say what to keep (e.g. --keep-daily 7)")))
            }
            let configuration = configurationFile.load()
            metrics.start(configured: configuration.metricsFile)
            var jobs = configuration.stores
            if let store {
                jobs = jobs.filter { $0.name == store }
                if jobs.isEmpty { Terminal.fail(StoreBackupError.unknownStore(name: store)) }
            }
            for job in jobs {
                guard let policy = job.appliedRetention else {
                    Terminal.info("storebackup: store \"\(job.name)\" has no retention; keeping all its backups")
                    continue
                }
                // Retention applies at each of the store's destinations (or only at --to).
                for value in destination.destination.map({ [$0] }) ?? job.allDestinations {
                    let target: any BackupDestination
                    var options = configuration.destinationOptions()
                    destination.connection.applyLimits(to: &options)
                    do {
                        target = try DestinationResolver.resolve(value, options: options)
                    } catch { Terminal.fail(error) }
                    targets.append(
                        Target(
                            destination: target, policy: policy, storesDirectory: job.storesDirectory,
                            stateDirectory: configuration.stateStore.directory,
                            passwords: job.passwordFile.map(PasswordProvider.file) ?? password.provider(confirm: false, prompt: false)))
                }
            }
        }

        var plans: [(Target, [RetentionGroup])] = []
        for target in targets {
            let backups = BackupRepository(destination: target.destination, passwords: target.passwords)
            let groups = await Terminal.runCancellable {
                try await backups.retentionPlan(
                    target.policy, host: hostFilter, storesDirectory: target.storesDirectory, originCache: target.stateDirectory)
            }
            plans.append((target, groups))
        }
        printPlans(plans)

        let doomed = plans.flatMap { $0.1.flatMap(\.toDelete) }
        // Unfinished uploads older than a day (an S3 multipart upload whose abort failed, a
        // temporary left by a killed create) are garbage, not backups: removed without asking.
        for target in targets {
            let destination = target.destination
            let leftovers = await Terminal.runCancellable { [dryRun] in
                try await dryRun ? destination.staleUploads(olderThan: 86_400) : destination.removeStaleUploads(olderThan: 86_400)
            }
            if !leftovers.isEmpty {
                Terminal.info(
                    "storebackup: \(dryRun ? "would remove" : "removed") \(leftovers.count) unfinished uploads older than a day "
                        + "from \(destination.displayName)")
            }
        }
        if dryRun || doomed.isEmpty {
            if !json {
                Terminal.info(
                    doomed.isEmpty ? "storebackup: nothing to delete" : "storebackup: dry run; \(doomed.count) backups would be deleted")
            }
            return
        }
        if !yes {
            guard Terminal.standardInputIsTerminal else {
                Terminal.fail(
                    StoreBackupError.restoreRefused(
                        reason: "pass --yes to delete \(doomed.count) backups when not running on a terminal (or --dry-run to look)"))
            }
            guard Terminal.confirm("Delete \(doomed.count) backups?") else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "not confirmed; nothing was deleted"))
            }
        }
        for (target, groups) in plans {
            let backups = BackupRepository(destination: target.destination, passwords: target.passwords)
            let place = target.destination.displayName
            let deleted = await Terminal.runCancellable {
                try await backups.prune(
                    groups,
                    locked: { name, until in
                        let when = until.map { "until " + ISO8601DateFormatter().string(from: $0) } ?? "by a legal hold"
                        Terminal.info("storebackup: kept \(name) at \(place): locked \(when) (S3 Object Lock)")
                    },
                    keptAsBase: { name, dependent in
                        Terminal.info("storebackup: kept \(name) at \(place): base of \(dependent), which is kept")
                    })
            }
            if !deleted.isEmpty { Terminal.info("storebackup: deleted \(deleted.count) backups from \(target.destination.displayName)") }
        }
    }

    func printPlans(_ plans: [(Target, [RetentionGroup])]) {
        let formatter = ISO8601DateFormatter()
        if json {
            let objects: [[String: Any]] = plans.flatMap { target, groups in
                groups.map { group -> [String: Any] in
                    [
                        "destination": target.destination.displayName, "policy": target.policy.summary,
                        "host": group.origin?.host ?? NSNull(), "storesDirectory": group.origin?.storesDirectory ?? NSNull(),
                        "backups": group.decisions.map { decision -> [String: Any] in
                            [
                                "name": decision.backup.name, "date": formatter.string(from: decision.backup.date),
                                "keep": decision.keep, "reasons": decision.reasons,
                            ]
                        },
                    ]
                }
            }
            let data = (try? JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys, .prettyPrinted])) ?? Data()
            Terminal.output(String(decoding: data, as: UTF8.self))
            return
        }
        for (target, groups) in plans {
            if groups.isEmpty { Terminal.output("\(target.destination.displayName): no backups of this host to prune") }
            for group in groups {
                let origin = group.origin.map { "\($0.host) \($0.storesDirectory)" } ?? "backups of unknown origin"
                Terminal.output("\(target.destination.displayName) — \(origin) — \(target.policy.summary)")
                for decision in group.decisions {
                    let verdict = decision.keep ? "keep  " : "delete"
                    let why = decision.keep ? "  (\(decision.reasons.joined(separator: ", ")))" : ""
                    Terminal.output("  \(verdict)  \(decision.backup.name)\(why)")
                }
            }
        }
    }
}
