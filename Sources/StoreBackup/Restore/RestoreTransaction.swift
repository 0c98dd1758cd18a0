import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One restore from start to end, and the only place that knows its order: take the
/// store's lock, finish any restore a crash left half-done, resolve the backup, stage it
/// (in place when the source keeps it on this machine, else downloaded beside the store),
/// unpack and check it into `<store>_New`, make that durable, swap it in, let the app
/// reload, then commit or roll back.
///
/// Every step that changes a folder is recorded in the ``RestoreJournal`` first; the renames
/// themselves are ``StoreSwapper``'s. A crash or power cut at any moment therefore leaves a
/// store that ``recover(_:)`` (run by the next command) makes whole: the old one, or the new
/// one once committed.
struct RestoreTransaction {
    let layout: StoreLayout
    /// Where the backup is fetched from.
    let source: any BackupDestination
    let passwords: PasswordProvider?
    let hooks: ReloadHooks
    /// Told what recovery of an interrupted restore did (see ``StoreHelper/logger``).
    let logger: Logger
    /// What the restore may let through and how it treats the live store.
    var options = RestoreOptions()
    private var appCommands: AppCommands? { options.appCommands }

    private var swapper: StoreSwapper { StoreSwapper(layout: layout) }

    /// Restores `nameOrLatest` (a backup's name, or `latest`) into the live stores directory.
    func run(_ nameOrLatest: String, progress: ProgressHandler?) async throws -> RestoreResult {
        let progress = ProgressPlan.stamping(ProgressPlan.restore, progress)
        // Only a folder (or nothing) can be replaced; anything else is refused before any change.
        if let info = try? FileSystem.lstatInfo(layout.live), info.st_mode & S_IFMT != S_IFDIR {
            throw StoreBackupError.restoreRefused(
                reason: "\(layout.live) is not a directory; restore replaces a stores directory and will not remove anything else")
        }
        try FileSystem.createDirectories(layout.parent)
        let lock = try StoreLock(storesDirectory: layout.live, purpose: "restore")
        defer { withExtendedLifetime(lock) {} }
        // Before anything that can fail for outside reasons (the destination), so a store left
        // mid-swap is whole again even when this restore goes no further.
        _ = try layout.recoverIfNeeded(logger: logger, startCommand: appCommands?.start)
        // Fail fast: the app must be stopped before minutes of downloading, not after.
        // (When allowed anyway, the check before the swap gives the one warning.)
        if appCommands == nil && options.checkStoreInUseEarly && !options.allowStoreInUse { _ = try checkNotInUse(afterStop: false) }

        let backup = try await source.resolve(nameOrLatest)
        if FileSystem.fileExists(layout.new) {
            throw StoreBackupError.restoreRefused(
                reason: "\(layout.new) already exists and is not from an interrupted restore; move it away first")
        }
        if let streamed = try await restoreWhileDownloading(backup, progress: progress) { return streamed }
        let staged = try await stage(backup.name, progress: progress)
        defer { if staged.downloaded { unlink(staged.path) } }
        let chain = try await fetchChain(newest: backup.name, staged: staged, progress: progress)
        defer { chain.removeDownloads() }
        return try await install(chain: chain, throttle: ProgressThrottle(progress))
    }

    /// Opens the staged backup and, when it is incremental, fetches and checks its chain
    /// down to a full (``StagedChain``): nothing is written before every link holds.
    func fetchChain(
        newest name: String, staged: (path: String, downloaded: Bool), progress: ProgressHandler?
    ) async throws -> StagedChain {
        let reader = try await StagedChain.open(staged.path, name: name, passwords: passwords)
        let newest = ChainLink(name: name, path: staged.path, downloaded: staged.downloaded, reader: reader)
        let transaction = self
        return try await StagedChain.fetch(
            newest: newest, destination: source, passwords: passwords,
            stage: { try await transaction.stage($0, progress: progress) })
    }

    /// The backup as a file on this machine: the source's own file when it keeps one here
    /// (read in place), else a download beside the store (same filesystem, not inside it)
    /// under the scratch name the next command's sweep recognises. The caller removes a download.
    private func stage(_ name: String, progress: ProgressHandler?) async throws -> (path: String, downloaded: Bool) {
        if let path = source.localPath(of: name) { return (path, false) }
        let target = layout.downloadPath()
        do {
            try await source.download(name, to: target, progress: progress)
        } catch {
            unlink(target)
            throw error
        }
        return (target, true)
    }

    /// Unpacks, checks and swaps in the staged chain (one full, or a full and the
    /// incrementals on it), then reloads and commits or rolls back. `whenUnpacked` runs once a
    /// full backup is unpacked, before the swap (a streamed restore waits there for the
    /// rest of its download and checks it); a failure there fails the restore as any other.
    func install(
        chain: StagedChain, throttle: ProgressThrottle, whenUnpacked: (@Sendable (CancellationFlag) throws -> Void)? = nil
    ) async throws -> RestoreResult {
        let backupName = chain.newest.name
        let layout = self.layout, extraction = options.extraction
        let hadLiveStore = FileSystem.fileExists(layout.live)
        let journal: @Sendable (RestoreJournal.Phase) throws -> Void = { phase in
            try RestoreJournal(phase: phase, backupName: backupName, hadLiveStore: hadLiveStore).save(to: layout.journal)
        }

        // 1. Unpack and verify beside the live store, then sync it; any failure leaves the
        //    live store untouched.
        let extracted: (databases: [String], files: Int, unverified: Bool, damaged: [String], verdicts: [String: DatabaseVerdict])
        do {
            extracted = try await runBlocking(name: "storebackup-restore") { cancel in
                let reader = chain.newest.reader
                try journal(.extracting)
                TestPausePoint.reach("extracting")
                if chain.links.count > 1 {
                    var applier = ChainApplier(chain: chain, cancel: cancel, progress: throttle)
                    applier.options = extraction
                    let databases = try applier.build(into: layout.new)
                    try TreeSync.sync(layout.new)
                    try cancel.throwIfCancelled()
                    TestPausePoint.reach("synced")
                    return (
                        databases, reader.manifest?.files.count ?? 0, false, applier.damagedDatabases.current.keys.sorted(),
                        applier.databaseVerdicts.current
                    )
                }
                let unpacking = RestoreUnpacking(
                    reader: reader,
                    options: extraction,
                    cancel: cancel, progress: throttle)
                // Every unpacked file and folder reaches the disk before the journal says
                // "swapping" (RestoreUnpacking syncs the tree).
                let databases = try unpacking.unpack(into: layout.new)
                try whenUnpacked?(cancel)
                try cancel.throwIfCancelled()
                TestPausePoint.reach("synced")
                let result = (
                    databases, reader.entries.count, reader.manifest == nil, unpacking.damagedDatabases.current.keys.sorted(),
                    unpacking.databaseVerdicts.current
                )
                // Nothing reads the backup again: its handle, entry list and manifest go before
                // the reload's check walks the restored tree (memory per entry, not at once).
                reader.release()
                return result
            }
        } catch {
            discardExtracted()
            throw error
        }

        let unpacked = Unpacked(
            backupName: backupName, hadLiveStore: hadLiveStore, databases: extracted.databases,
            files: extracted.files, unverified: extracted.unverified, damaged: extracted.damaged, verdicts: extracted.verdicts)
        // Last point where cancelling is honoured before the app is stopped.
        if Task.isCancelled { discardExtracted(unpacked, appStopped: false); throw StoreBackupError.cancelled }
        throttle.report(BackupProgress(phase: .swapping), force: true)
        guard let commands = appCommands else {
            return try await swapAndReload(unpacked, appStopped: false, throttle: throttle)
        }
        return try await withAppStopped(commands, unpacked) {
            try await swapAndReload(unpacked, appStopped: true, throttle: throttle)
        }
    }

    /// What step 1 unpacked into `_New`.
    private struct Unpacked: Sendable {
        var backupName: String
        var hadLiveStore: Bool
        var databases: [String]
        var files: Int
        var unverified: Bool
        /// Databases damaged at the source, restored because they were accepted.
        var damaged: [String]
        /// Proven or checked, and why, by database.
        var verdicts: [String: DatabaseVerdict]
    }

    /// Runs the stop command, then `body` (the swap) if it succeeded, then the start command
    /// whatever happened: after a commit, a rollback, a failure or a cancellation; then a
    /// committed restore's `_Old` goes. The journal says the app is stopped from before the
    /// stop runs until the start has run.
    private func withAppStopped(
        _ commands: AppCommands, _ unpacked: Unpacked,
        _ body: () async throws -> RestoreResult
    ) async throws -> RestoreResult {
        try RestoreJournal(
            phase: .extracting, backupName: unpacked.backupName, hadLiveStore: unpacked.hadLiveStore,
            appStopped: true, startCommand: commands.start
        ).save(to: layout.journal)
        let clock = ContinuousClock()
        let stopped = clock.now
        // The commands are not logged: they may carry credentials.
        logger.notice("stopping the app (stop command)")
        let stop = await Self.runShell(commands.stop, timeout: commands.timeout)
        let stopSeconds = (clock.now - stopped).inSeconds
        var outcome: Result<RestoreResult, Error>
        if let failure = stop.failure {
            discardExtracted(unpacked, appStopped: true)
            outcome = .failure(
                StoreBackupError.restoreRefused(
                    reason: "the stop command failed (\(failure)); nothing was swapped"))
        } else {
            do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
        }
        var downtime = AppDowntime(seconds: 0, stopSeconds: stopSeconds)
        if let start = commands.start {
            logger.notice("starting the app (start command)")
            let began = clock.now
            let started = await Self.runShell(start, timeout: commands.timeout)
            downtime.startSeconds = (clock.now - began).inSeconds
            downtime.startFailure = started.failure.map { "the start command failed (\($0))" }
        }
        downtime.seconds = (clock.now - stopped).inSeconds
        if case .success = outcome {
            do {
                try swapper.removeOld()
                RestoreJournal.remove(at: layout.journal)
            } catch { outcome = .failure(error) }
        }
        if let left = RestoreJournal.load(from: layout.journal) {
            if left.phase == .startingApp {
                RestoreJournal.remove(at: layout.journal)
            } else {
                // A step failed half-way and recovery must finish it; the app has had its start.
                var finished = left
                finished.appStopped = nil
                finished.startCommand = nil
                try? finished.save(to: layout.journal)
            }
        }
        logger.notice("\(downtime.description)")
        if let failure = downtime.startFailure { logger.error("\(failure)") }
        var result = try outcome.get()
        result.appDowntime = downtime
        return result
    }

    /// A shell command on a thread of its own; cancelling does not stop it (a stop or start
    /// runs to its end or its timeout).
    private static func runShell(_ command: String, timeout: Double) async -> ShellCommand.Outcome {
        (try? await runBlocking(name: "storebackup-app-command") { _ in ShellCommand.run(command, timeout: timeout) })
            ?? .couldNotStart(errno: EAGAIN)
    }

    /// 2. Swap, then let the app reload; roll back if it refuses the new store.
    /// 3. Commit: `_Old` goes only once the journal says so.
    private func swapAndReload(_ unpacked: Unpacked, appStopped: Bool, throttle: ProgressThrottle) async throws -> RestoreResult {
        let backupName = unpacked.backupName, hadLiveStore = unpacked.hadLiveStore
        let layout = self.layout
        let journal = { (phase: RestoreJournal.Phase) throws -> Void in
            try RestoreJournal(
                phase: phase, backupName: backupName, hadLiveStore: hadLiveStore,
                appStopped: appStopped ? true : nil, startCommand: appStopped ? appCommands?.start : nil
            )
            .save(to: layout.journal)
        }
        do { try await hooks.willSwap() } catch {
            discardExtracted(unpacked, appStopped: appStopped)
            // The app may have paused half-way; let it resume on its untouched store.
            if hadLiveStore { try? await hooks.reload(layout.live) }
            throw StoreBackupError.restoreRefused(reason: "the app's willSwap hook failed (\(error)); the live store was not touched")
        }
        // The race: a process may have opened the store while the backup was unpacked, or
        // the hooks or the stop command left a connection open.
        let inUseWarning: String?
        do {
            inUseWarning = try checkNotInUse(afterStop: appStopped)
            // Cancelled while the app was stopping: nothing is swapped (the start still runs).
            if Task.isCancelled { throw StoreBackupError.cancelled }
        } catch {
            discardExtracted(unpacked, appStopped: appStopped)
            if hadLiveStore && hooks.resumesApp { try? await hooks.reload(layout.live) }
            throw error
        }
        // The renames are durable before the journal says "reloading".
        try journal(.swapping)
        TestPausePoint.reach("before-swap")
        try swapper.swapIn(hadLiveStore: hadLiveStore)
        try journal(.reloading)
        TestPausePoint.reach("before-reload")
        throttle.report(BackupProgress(phase: .reloading), force: true)
        do {
            try await hooks.reload(layout.live)
        } catch {
            throw await rollBack(after: error, backupName: backupName, hadLiveStore: hadLiveStore, appStopped: appStopped)
        }

        try journal(.committing)
        TestPausePoint.reach("before-cleanup")
        // With the app stopped, `_Old` goes after its start: removing a large store is not downtime.
        if !appStopped {
            try swapper.removeOld()
            RestoreJournal.remove(at: layout.journal)
        }
        throttle.report(BackupProgress(phase: .done), force: true)
        return RestoreResult(
            backupName: backupName, storesDirectory: layout.live,
            databasesChecked: unpacked.databases.filter { unpacked.verdicts[$0] != .proven },
            databasesProven: unpacked.databases.filter { unpacked.verdicts[$0] == .proven },
            checkReasons: unpacked.verdicts.compactMapValues { if case .checked(let reason) = $0 { reason } else { nil } },
            fileCount: unpacked.files, warning: unpacked.unverified ? ExtractionPlan.unverifiedWarning : nil,
            damagedDatabases: unpacked.damaged, storeInUseWarning: inUseWarning)
    }

    /// Refuses when other processes have the live store open, or when the check could not
    /// see every process; with ``allowStoreInUse`` it warns instead (the warning is returned).
    private func checkNotInUse(afterStop: Bool) throws -> String? {
        let clock = ContinuousClock()
        let began = clock.now
        let usage = StoreUsage.scan(storesDirectory: layout.live)
        logger.debug(
            "in-use check",
            metadata: [
                "seconds": "\((clock.now - began).inSeconds)",
                "processes": "\(usage.users.count)",
            ])
        if usage.isUnused && usage.blindSpots.isEmpty { return nil }
        let users = usage.isUnused ? nil : usage.describeUsers(still: afterStop)
        let unseen = usage.blindSpots.isEmpty ? nil : usage.blindSpots.joined(separator: "; ")
        if options.allowStoreInUse || (users == nil && options.allowUnseenProcesses) {
            let warning =
                users.map { "restoring a store in use: " + $0 + (unseen.map { "; " + $0 } ?? "") }
                ?? "restoring although the in-use check could not see every process: \(unseen ?? "")"
            logger.warning("\(warning)")
            return warning
        }
        if let users {
            if afterStop {
                throw StoreBackupError.storeInUse(reason: "\(users) after the stop command; nothing was swapped", remedy: nil)
            }
            throw StoreBackupError.storeInUse(reason: users, remedy: .stopStoreUsers)
        }
        throw StoreBackupError.storeInUse(reason: "cannot tell whether \(layout.live) is in use: \(unseen ?? "")", remedy: .allowStoreInUse)
    }

    /// The store is whole: the journal goes, or, while the app is stopped, says only its start is left.
    private func settleJournal(backupName: String, hadLiveStore: Bool, appStopped: Bool) {
        guard appStopped else { return RestoreJournal.remove(at: layout.journal) }
        let pending = RestoreJournal(
            phase: .startingApp, backupName: backupName, hadLiveStore: hadLiveStore,
            appStopped: true, startCommand: appCommands?.start)
        if (try? pending.save(to: layout.journal)) == nil { RestoreJournal.remove(at: layout.journal) }
    }

    /// The app rejected the restored store: put the old one back, reload it, tell the app.
    /// Returns the error the restore throws.
    private func rollBack(after reloadError: Error, backupName: String, hadLiveStore: Bool, appStopped: Bool) async -> Error {
        let report: SetAsideReport?
        do {
            try RestoreJournal(
                phase: .rollingBack, backupName: backupName, hadLiveStore: hadLiveStore,
                appStopped: appStopped ? true : nil, startCommand: appStopped ? appCommands?.start : nil
            )
            .save(to: layout.journal)
            report = try swapper.putBackOld(hadLiveStore: hadLiveStore, keepRejected: true)
            settleJournal(backupName: backupName, hadLiveStore: hadLiveStore, appStopped: appStopped)
        } catch {
            // The journal still says "rolling back": recovery (the next command) finishes it.
            // The old store is not live, so there is nothing to reload or report as rolled back.
            return StoreBackupError.reloadFailed(
                reason: "\(reloadError); putting the previous store back failed (\(error))", rolledBack: false)
        }
        var reason = "\(reloadError)"
        if let report { reason += "; " + report.description }
        if hadLiveStore {
            do { try await hooks.reload(layout.live) } catch {
                reason += "; reloading the previous store also failed: \(error)"
            }
        }
        await hooks.didRollback(StoreBackupError.wrapping(reloadError))
        return StoreBackupError.reloadFailed(reason: reason, rolledBack: hadLiveStore)
    }

    /// Before the swap: the unpacked copy and its journal go; the live store was never touched.
    private func discardExtracted() {
        try? swapper.removeNew()
        RestoreJournal.remove(at: layout.journal)
    }

    private func discardExtracted(_ unpacked: Unpacked, appStopped: Bool) {
        try? swapper.removeNew()
        settleJournal(backupName: unpacked.backupName, hadLiveStore: unpacked.hadLiveStore, appStopped: appStopped)
    }
}
