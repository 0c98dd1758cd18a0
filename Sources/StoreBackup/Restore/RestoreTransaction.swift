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
    /// The clock that dates a kept store's expiry and decides when it is up (tests step it).
    var now: @Sendable () -> Date = { Date() }
    var appCommands: AppCommands? { options.appCommands }

    var swapper: StoreSwapper { StoreSwapper(layout: layout) }
    /// What ``RestoreOptions/delta`` did, for the result.
    let deltaOutcome = Locked<RestoreDelta?>(nil)

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
        _ = try layout.recoverIfNeeded(logger: logger, startCommand: appCommands?.start, now: now())
        // Fail fast: the app must be stopped before minutes of downloading, not after.
        // (When allowed anyway, the check before the swap gives the one warning.)
        if appCommands == nil && options.checkStoreInUseEarly && !options.allowStoreInUse { _ = try checkNotInUse(afterStop: false) }

        let backup = try await source.resolve(nameOrLatest)
        if FileSystem.fileExists(layout.new) {
            throw StoreBackupError.restoreRefused(
                reason: "\(layout.new) already exists and is not from an interrupted restore; move it away first")
        }
        if let delta = try await restoreDelta(backup, progress: progress) { return delta }
        if let streamed = try await restoreWhileDownloading(backup, progress: progress) { return reportingDelta(streamed) }
        let staged = try await stage(backup.name, progress: progress)
        defer { if staged.downloaded { unlink(staged.path) } }
        let chain = try await fetchChain(newest: backup.name, staged: staged, progress: progress)
        defer { chain.removeDownloads() }
        return reportingDelta(try await install(chain: chain, throttle: ProgressThrottle(progress)))
    }

    /// Opens the staged backup (unless `opened` is its reader already) and, when it is
    /// incremental, fetches and checks its chain down to a full (``StagedChain``): nothing is
    /// written before every link holds.
    func fetchChain(
        newest name: String, staged: (path: String, downloaded: Bool), opened: ArchiveReader? = nil, progress: ProgressHandler?,
        streamFull: (@Sendable (BackupListing) async throws -> ArrivingBase?)? = nil
    ) async throws -> StagedChain {
        let reader: ArchiveReader
        if let opened { reader = opened } else { reader = try await StagedChain.open(staged.path, name: name, passwords: passwords) }
        let newest = ChainLink(name: name, path: staged.path, downloaded: staged.downloaded, reader: reader)
        let transaction = self
        return try await StagedChain.fetch(
            newest: newest, destination: source, passwords: passwords,
            stage: { try await transaction.stage($0, progress: progress) }, streamFull: streamFull)
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
    /// full backup or a chain is unpacked, before the swap (a streamed restore waits there
    /// for the rest of its download and checks it); a failure there fails the restore as any other.
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
                    applier.syncsFullAsItUnpacks = true
                    applier.options = extraction
                    let databases = try applier.build(into: layout.new)
                    try whenUnpacked?(cancel)
                    try TreeSync.sync(layout.new)
                    try cancel.throwIfCancelled()
                    TestPausePoint.reach("synced")
                    return (
                        databases, reader.manifest?.files.count ?? 0, false, applier.damagedDatabases.current.keys.sorted(),
                        applier.databaseVerdicts.current
                    )
                }
                if let delta = try unpackDelta(reader, hadLiveStore: hadLiveStore, cancel: cancel, throttle: throttle) {
                    try whenUnpacked?(cancel)
                    try cancel.throwIfCancelled()
                    TestPausePoint.reach("synced")
                    reader.release()
                    return delta
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

        let plan = SwapPlan(
            backupName: backupName, hadLiveStore: hadLiveStore,
            keepReplaced: options.keepReplaced > 0 ? options.keepReplaced : nil)
        // Last point where cancelling is honoured before the app is stopped.
        if Task.isCancelled { discardBeforeSwap(plan, appStopped: false); throw StoreBackupError.cancelled }
        throttle.report(BackupProgress(phase: .swapping), force: true)
        let outcome = try await swapWithApp(plan, throttle: throttle)
        let verdicts = extracted.verdicts
        var result = RestoreResult(
            backupName: backupName, storesDirectory: layout.live,
            databasesChecked: extracted.databases.filter { verdicts[$0] != .proven },
            databasesProven: extracted.databases.filter { verdicts[$0] == .proven },
            checkReasons: verdicts.compactMapValues { if case .checked(let reason) = $0 { reason } else { nil } },
            fileCount: extracted.files, warning: extracted.unverified ? ExtractionPlan.unverifiedWarning : nil,
            damagedDatabases: extracted.damaged, storeInUseWarning: outcome.inUseWarning)
        result.appDowntime = outcome.downtime
        result.replacedStore = outcome.kept?.kept
        result.keepWarning = outcome.kept?.warning
        return result
    }

    /// Swaps `plan` in, with the app stopped around it when ``appCommands`` say how.
    func swapWithApp(_ plan: SwapPlan, throttle: ProgressThrottle) async throws -> SwapOutcome {
        guard let commands = appCommands else {
            return try await swapAndReload(plan, appStopped: false, throttle: throttle)
        }
        return try await withAppStopped(commands, plan) {
            try await swapAndReload(plan, appStopped: true, throttle: throttle)
        }
    }

    /// Runs the stop command, then `body` (the swap) if it succeeded, then the start command
    /// whatever happened: after a commit, a rollback, a failure or a cancellation; then a
    /// committed transaction's `_Old` is kept or goes. The journal says the app is stopped
    /// from before the stop runs until the start has run.
    private func withAppStopped(
        _ commands: AppCommands, _ plan: SwapPlan,
        _ body: () async throws -> SwapOutcome
    ) async throws -> SwapOutcome {
        try plan.journal(.extracting, appStopped: true, startCommand: commands.start).save(to: layout.journal)
        TestPausePoint.reach("before-stop")
        let clock = ContinuousClock()
        let stopped = clock.now
        // The commands are not logged: they may carry credentials.
        logger.notice("stopping the app (stop command)")
        let stop = await Self.runShell(commands.stop, timeout: commands.timeout)
        let stopSeconds = (clock.now - stopped).inSeconds
        var outcome: Result<SwapOutcome, Error>
        if let failure = stop.failure {
            discardBeforeSwap(plan, appStopped: true)
            outcome = .failure(
                StoreBackupError.restoreRefused(
                    reason: "the stop command failed (\(failure)); nothing was swapped"))
        } else {
            do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
        }
        var downtime = AppDowntime(seconds: 0, stopSeconds: stopSeconds)
        TestPausePoint.reach("before-start")
        if let start = commands.start {
            logger.notice("starting the app (start command)")
            let began = clock.now
            let started = await Self.runShell(start, timeout: commands.timeout)
            downtime.startSeconds = (clock.now - began).inSeconds
            downtime.startFailure = started.failure.map { "the start command failed (\($0))" }
        }
        downtime.seconds = (clock.now - stopped).inSeconds
        if case .success(var swapped) = outcome {
            do {
                swapped.kept = try commit(plan)
                outcome = .success(swapped)
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
        result.downtime = downtime
        return result
    }

    /// A shell command on a thread of its own; cancelling does not stop it (a stop or start
    /// runs to its end or its timeout).
    private static func runShell(_ command: String, timeout: Double) async -> ShellCommand.Outcome {
        (try? await runBlocking(name: "storebackup-app-command") { _ in ShellCommand.run(command, timeout: timeout) })
            ?? .couldNotStart(errno: EAGAIN)
    }

    /// 2. Swap, then let the app reload; roll back if it refuses the new store.
    /// 3. Commit: `_Old` is kept or goes only once the journal says so.
    private func swapAndReload(_ plan: SwapPlan, appStopped: Bool, throttle: ProgressThrottle) async throws -> SwapOutcome {
        let hadLiveStore = plan.hadLiveStore
        let layout = self.layout, start = appCommands?.start
        let journal = { (phase: RestoreJournal.Phase) throws -> Void in
            try plan.journal(phase, appStopped: appStopped, startCommand: start).save(to: layout.journal)
        }
        do { try await hooks.willSwap() } catch {
            discardBeforeSwap(plan, appStopped: appStopped)
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
            discardBeforeSwap(plan, appStopped: appStopped)
            if hadLiveStore && hooks.resumesApp { try? await hooks.reload(layout.live) }
            throw error
        }
        // The renames are durable before the journal says "reloading".
        try journal(.swapping)
        TestPausePoint.reach("before-swap")
        if plan.undo { try swapper.swapInReplaced(hadLiveStore: hadLiveStore) } else { try swapper.swapIn(hadLiveStore: hadLiveStore) }
        try journal(.reloading)
        TestPausePoint.reach("before-reload")
        throttle.report(BackupProgress(phase: .reloading), force: true)
        do {
            try await hooks.reload(layout.live)
        } catch {
            throw await rollBack(after: error, plan, appStopped: appStopped)
        }

        try plan.journal(.committing, appStopped: appStopped, startCommand: start, keepUntil: plan.keepReplaced.map { now() + $0 })
            .save(to: layout.journal)
        TestPausePoint.reach("before-cleanup")
        var outcome = SwapOutcome(inUseWarning: inUseWarning)
        // With the app stopped, `_Old` is kept or goes after its start: that is not downtime.
        if !appStopped { outcome.kept = try commit(plan) }
        throttle.report(BackupProgress(phase: .done), force: true)
        return outcome
    }

    /// The committed transaction's last step, then its journal goes: a restore keeps the store
    /// it replaced (or drops it), an undo drops the restored store. Returns what a restore kept.
    private func commit(_ plan: SwapPlan) throws -> ReplacedStoreKeeper.Outcome? {
        let keeper = ReplacedStoreKeeper(layout: layout)
        var kept: ReplacedStoreKeeper.Outcome?
        if plan.undo {
            try keeper.commitUndo()
        } else {
            let keepUntil = RestoreJournal.load(from: layout.journal)?.keepReplacedUntil ?? plan.keepReplaced.map { now() + $0 }
            kept = try keeper.commitRestore(
                backupName: plan.backupName, hadLiveStore: plan.hadLiveStore, keepUntil: keepUntil, now: now())
            if let warning = kept?.warning { logger.warning("\(warning)") }
        }
        RestoreJournal.remove(at: layout.journal)
        return kept
    }

    /// Refuses when other processes have the live store open, or when the check could not
    /// see every process; with ``allowStoreInUse`` it warns instead (the warning is returned).
    func checkNotInUse(afterStop: Bool) throws -> String? {
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
    private func settleJournal(_ plan: SwapPlan, appStopped: Bool) {
        guard appStopped else { return RestoreJournal.remove(at: layout.journal) }
        let pending = plan.journal(.startingApp, appStopped: true, startCommand: appCommands?.start)
        if (try? pending.save(to: layout.journal)) == nil { RestoreJournal.remove(at: layout.journal) }
    }

    /// The app rejected the restored store: put the old one back, reload it, tell the app.
    /// Returns the error the restore throws.
    private func rollBack(after reloadError: Error, _ plan: SwapPlan, appStopped: Bool) async -> Error {
        let hadLiveStore = plan.hadLiveStore
        let report: SetAsideReport?
        do {
            try plan.journal(.rollingBack, appStopped: appStopped, startCommand: appCommands?.start).save(to: layout.journal)
            if plan.undo {
                try swapper.putBackReplaced(hadLiveStore: hadLiveStore)
                report = nil
            } else {
                report = try swapper.putBackOld(hadLiveStore: hadLiveStore, keepRejected: true)
            }
            settleJournal(plan, appStopped: appStopped)
        } catch {
            // The journal still says "rolling back": recovery (the next command) finishes it.
            // The old store is not live, so there is nothing to reload or report as rolled back.
            return StoreBackupError.reloadFailed(
                reason: "\(reloadError); putting the previous store back failed (\(error))", rolledBack: false)
        }
        var reason = "\(reloadError)"
        if let report { reason += "; " + report.description }
        if plan.undo { reason += "; the undo is rolled back: the restored store is live and the replaced one is kept again" }
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

    /// Abandoned before the swap: a restore's unpacked copy goes (an undo moved nothing).
    private func discardBeforeSwap(_ plan: SwapPlan, appStopped: Bool) {
        if !plan.undo { try? swapper.removeNew() }
        settleJournal(plan, appStopped: appStopped)
    }
}
