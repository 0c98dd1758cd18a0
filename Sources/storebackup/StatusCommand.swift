import ArgumentParser
import Foundation
import StoreBackup

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show each store's last backup, last failure, last verification and next scheduled run.",
        discussion: """
            Reads the state files that `run` and `create --config` keep (in state-directory from the \
            configuration, else $STOREBACKUP_STATE_DIR, else $XDG_STATE_HOME/storebackup, else \
            ~/.local/state/storebackup). With a configuration, every configured store is shown, \
            also those that never ran. A folder a restore set aside beside a store \
            (<dir>_FailedRestore) is listed with its size ("setAside": [{path, size}] in JSON), and \
            so is the store the last restore replaced, kept for `undo` (<dir>_Replaced), with the \
            backup that replaced it and when it expires ("replaced": {path, size, replacedBy, \
            replacedAt, keptUntil, undoCommand} or null).
            """)

    @OptionGroup var configurationFile: ConfigurationOption

    @Flag(
        help:
            "Print JSON: an array of {store, storesDirectory, destination, schedule, lastSuccess, lastFailure, lastStarted, nextRun, lastVerifySuccess, lastVerifyFailure ({at, backups, destination, trigger, error}), verifyFailing, nextVerify, setAside, replaced, and for several destinations destinations: {NAME: {lastSuccess, lastFailure}}} (and leftovers with --leftovers)."
    )
    var json = false

    @Flag(help: "Also ask each destination for unfinished uploads older than a day (what `prune` removes).")
    var leftovers = false

    func run() async throws {
        let now = Date()
        let configuration = configurationFile.loadIfPresent()
        let stateStore = configuration?.stateStore ?? BackupStateStore(directory: BackupStateStore.defaultDirectory())
        var rows: [BackupState] = []
        if let configuration {
            for job in configuration.stores {
                var state =
                    stateStore.load(job.name)
                    ?? BackupState(
                        store: job.name, storesDirectory: job.storesDirectory, destination: job.destination)
                state.schedule = job.schedule.description
                // A plan from a service that has stopped is stale: show when the schedule would fire.
                if (state.nextRun ?? .distantPast) < now { state.nextRun = job.schedule.nextFire(after: now) }
                if let drill = job.verify, (state.nextVerify ?? .distantPast) < now {
                    state.nextVerify = drill.schedule.nextFire(after: now)
                }
                rows.append(state)
            }
        } else {
            rows = stateStore.loadAll()
        }

        var options = configuration?.destinationOptions() ?? DestinationOptions()
        options.objectLock = nil  // status only looks: a lock for new backups does not apply
        var leftoverText: [String: String] = [:]
        if leftovers {
            for url in Set(rows.compactMap(\.destination)) { leftoverText[url] = await Self.leftovers(url, options: options) }
        }
        if json {
            let formatter = ISO8601DateFormatter()
            let objects: [[String: Any]] = rows.map { state in
                var object: [String: Any] = ["store": state.store, "storesDirectory": state.storesDirectory]
                object["destination"] = state.destination ?? NSNull()
                object["schedule"] = state.schedule ?? NSNull()
                object["lastStarted"] = state.lastStarted.map(formatter.string(from:)) ?? NSNull()
                object["nextRun"] = state.nextRun.map(formatter.string(from:)) ?? NSNull()
                object["setAside"] = StoreLayout(storesDirectory: state.storesDirectory).setAsideStores().map { store in
                    ["path": store.path, "size": store.bytes] as [String: Any]
                }
                object["replaced"] =
                    StoreLayout(storesDirectory: state.storesDirectory).replacedStore().map { kept -> [String: Any] in
                        [
                            "path": kept.path, "size": kept.bytes, "replacedBy": kept.replacedBy ?? NSNull(),
                            "replacedAt": kept.replacedAt.map(formatter.string(from:)) ?? NSNull(),
                            "keptUntil": kept.keptUntil.map(formatter.string(from:)) ?? NSNull(),
                            "undoCommand": "storebackup undo " + UndoCommand.shellQuoted(state.storesDirectory),
                        ]
                    } ?? NSNull()
                object["lastSuccess"] =
                    state.lastSuccess.map { success in
                        [
                            "at": formatter.string(from: success.at), "backup": success.backup, "size": success.size,
                            "durationSeconds": success.durationSeconds, "ageSeconds": Int(now.timeIntervalSince(success.at)),
                        ] as [String: Any]
                    } ?? NSNull()
                object["lastFailure"] =
                    state.lastFailure.map { failure in
                        ["at": formatter.string(from: failure.at), "error": failure.error] as [String: Any]
                    } ?? NSNull()
                for (key, verification) in [("lastVerifySuccess", state.lastVerifySuccess), ("lastVerifyFailure", state.lastVerifyFailure)]
                {
                    object[key] =
                        verification.map { verification -> [String: Any] in
                            var fields: [String: Any] = [
                                "at": formatter.string(from: verification.at), "backups": verification.backups,
                                "destination": verification.destination, "trigger": verification.trigger,
                                "ageSeconds": Int(now.timeIntervalSince(verification.at)),
                            ]
                            fields["error"] = verification.error
                            return fields
                        } ?? NSNull()
                }
                object["verifyFailing"] = Self.verifyFailing(state)
                object["nextVerify"] = state.nextVerify.map(formatter.string(from:)) ?? NSNull()
                if leftovers { object["leftovers"] = state.destination.flatMap { leftoverText[$0] } ?? NSNull() }
                if let destinations = state.destinations {
                    object["destinations"] = destinations.mapValues { record -> [String: Any] in
                        let success: Any =
                            record.lastSuccess.map { success -> [String: Any] in
                                ["at": formatter.string(from: success.at), "backup": success.backup, "size": success.size]
                            } ?? NSNull()
                        let failure: Any =
                            record.lastFailure.map { failure -> [String: Any] in
                                ["at": formatter.string(from: failure.at), "error": failure.error]
                            } ?? NSNull()
                        return ["lastSuccess": success, "lastFailure": failure]
                    }
                }
                return object
            }
            let data = try JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys, .prettyPrinted])
            Terminal.output(String(decoding: data, as: UTF8.self))
            return
        }
        guard !rows.isEmpty else {
            Terminal.info("no store has run yet (state folder: \(stateStore.directory))")
            return
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss zzz"
        for state in rows {
            Terminal.output("\(state.store)  \(state.storesDirectory)")
            if let destination = state.destination { Terminal.output("  destination   \(destination)") }
            if let schedule = state.schedule { Terminal.output("  schedule      \(schedule)") }
            if let success = state.lastSuccess {
                let age = DurationText.format(now.timeIntervalSince(success.at).rounded())
                Terminal.output(
                    "  last backup   \(formatter.string(from: success.at)) (\(age) ago)  \(Terminal.formatBytes(success.size))  \(success.backup)"
                )
            } else {
                Terminal.output("  last backup   never")
            }
            for store in StoreLayout(storesDirectory: state.storesDirectory).setAsideStores() {
                Terminal.output("  set aside     \(store.path)  \(Terminal.formatBytes(store.bytes))")
            }
            if let kept = StoreLayout(storesDirectory: state.storesDirectory).replacedStore() {
                Terminal.output(
                    "  replaced      \(kept.path)  \(Terminal.formatBytes(kept.bytes))  \(Self.describe(kept, formatter: formatter))")
            }
            if let failure = state.lastFailure {
                Terminal.output("  last failure  \(formatter.string(from: failure.at))  \(failure.error)")
            }
            for (name, record) in (state.destinations ?? [:]).sorted(by: { $0.key < $1.key }) {
                // A destination is failing when its last failure is newer than its last success.
                let failing = (record.lastFailure?.at ?? .distantPast) > (record.lastSuccess?.at ?? .distantPast)
                var line = "  \(failing ? "FAILING" : "ok     ")       \(name)"
                if let success = record.lastSuccess { line += "  last backup \(formatter.string(from: success.at))  \(success.backup)" }
                if failing, let failure = record.lastFailure { line += "  failed \(formatter.string(from: failure.at)): \(failure.error)" }
                Terminal.output(line)
            }
            if let verified = state.lastVerifySuccess {
                let age = DurationText.format(now.timeIntervalSince(verified.at).rounded())
                Terminal.output(
                    "  last verify   \(formatter.string(from: verified.at)) (\(age) ago, \(verified.trigger))  \(verified.backups.joined(separator: ", "))"
                )
            }
            if Self.verifyFailing(state), let failed = state.lastVerifyFailure {
                Terminal.output("  VERIFY FAILED \(formatter.string(from: failed.at)) (\(failed.trigger))  \(failed.error ?? "")")
            }
            if let next = state.nextRun { Terminal.output("  next run      \(formatter.string(from: next))") }
            if let next = state.nextVerify { Terminal.output("  next drill    \(formatter.string(from: next))") }
            if let text = state.destination.flatMap({ leftoverText[$0] }) { Terminal.output("  leftovers     \(text)") }
        }
    }
}

extension StatusCommand {
    /// Whether the store's last verification failed: its failure is not older than its last
    /// success (the state keeps whole seconds; within one second, failing is the safer answer).
    static func verifyFailing(_ state: BackupState) -> Bool {
        guard let failure = state.lastVerifyFailure else { return false }
        return failure.at >= (state.lastVerifySuccess?.at ?? .distantPast)
    }

    /// Which restore replaced a kept store, until when it is kept, and how to undo it.
    static func describe(_ kept: ReplacedStore, formatter: DateFormatter) -> String {
        var text = "by " + UndoCommand.replacedBy(kept)
        if let until = kept.keptUntil {
            text += ", kept until \(formatter.string(from: until))"
        } else {
            text += ", no record: kept until removed by hand"
        }
        let store = String(kept.path.dropLast("_Replaced".count))
        return text + " (undo: storebackup undo \(UndoCommand.shellQuoted(store)))"
    }

    /// "none", "3 unfinished uploads (run prune to remove them)", or why the destination could not say.
    static func leftovers(_ url: String, options: DestinationOptions) async -> String {
        do {
            let destination = try DestinationResolver.resolve(url, options: options)
            let stale = try await destination.staleUploads(olderThan: 86_400)
            return stale.isEmpty ? "none" : "\(stale.count) unfinished uploads older than a day (`prune` removes them)"
        } catch {
            return "could not look: \(error)"
        }
    }
}
