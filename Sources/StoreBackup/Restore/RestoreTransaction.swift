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
    /// Accept an archive without a manifest (see ``StoreHelper/allowUnverified``).
    var allowUnverified = false
    /// Make the links the manifest records as pointing outside (see ``StoreHelper/allowOutsideLinks``).
    var allowOutsideLinks = false

    private var swapper: StoreSwapper { StoreSwapper(layout: layout) }

    /// Restores `nameOrLatest` (a backup's name, or `latest`) into the live stores directory.
    func run(_ nameOrLatest: String, progress: ProgressHandler?) async throws -> RestoreResult {
        let progress = ProgressPlan.stamping(ProgressPlan.restore, progress)
        // Only a folder (or nothing) can be replaced; anything else is refused before any change.
        if let info = try? FileSystem.lstatInfo(layout.live), info.st_mode & S_IFMT != S_IFDIR {
            throw StoreBackupError.restoreRefused(reason: "\(layout.live) is not a directory; restore replaces a stores directory and will not remove anything else")
        }
        try FileSystem.createDirectories(layout.parent)
        let lock = try StoreLock(storesDirectory: layout.live, purpose: "restore")
        defer { withExtendedLifetime(lock) {} }
        // Before anything that can fail for outside reasons (the destination), so a store left
        // mid-swap is whole again even when this restore goes no further.
        _ = try layout.recoverIfNeeded(logger: logger)

        let backup = try await source.resolve(nameOrLatest)
        if FileSystem.fileExists(layout.new) {
            throw StoreBackupError.restoreRefused(reason: "\(layout.new) already exists and is not from an interrupted restore; move it away first")
        }
        let staged = try await stage(backup.name, progress: progress)
        defer { if staged.downloaded { unlink(staged.path) } }
        return try await install(archive: staged.path, backupName: backup.name, throttle: ProgressThrottle(progress))
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

    /// Unpacks, checks and swaps in the staged archive, then reloads and commits or rolls back.
    private func install(archive: String, backupName: String, throttle: ProgressThrottle) async throws -> RestoreResult {
        let layout = self.layout, passwords = self.passwords, allowUnverified = self.allowUnverified
        let allowOutsideLinks = self.allowOutsideLinks
        let hadLiveStore = FileSystem.fileExists(layout.live)
        let journal: @Sendable (RestoreJournal.Phase) throws -> Void = { phase in
            try RestoreJournal(phase: phase, backupName: backupName, hadLiveStore: hadLiveStore).save(to: layout.journal)
        }

        // 1. Unpack and verify beside the live store, then sync it; any failure leaves the
        //    live store untouched.
        let extracted: (databases: [String], files: Int, unverified: Bool)
        do {
            extracted = try await runBlocking(name: "storebackup-restore") { cancel in
                let reader = try ArchiveReader(path: archive, backupName: backupName, passwords: passwords)
                try journal(.extracting)
                TestPausePoint.reach("extracting")
                var extractor = Extractor(reader: reader, cancel: cancel, progress: throttle)
                extractor.allowUnverified = allowUnverified
                extractor.allowOutsideLinks = allowOutsideLinks
                // Every unpacked file and folder reaches the disk before the journal says
                // "swapping"; the sync runs while the databases are still being checked.
                extractor.syncTree = { try TreeSync.sync($0) }
                let databases = try extractor.extract(into: layout.new)
                try cancel.throwIfCancelled()
                TestPausePoint.reach("synced")
                return (databases, reader.entries.count, reader.manifest == nil)
            }
        } catch {
            discardExtracted()
            throw error
        }

        // 2. Swap, then let the app reload; roll back if it refuses the new store.
        // Last point where cancelling is honoured: after this the swap runs to its end.
        if Task.isCancelled { discardExtracted(); throw StoreBackupError.cancelled }
        throttle.report(BackupProgress(phase: .swapping), force: true)
        do { try await hooks.willSwap() } catch {
            discardExtracted()
            // The app may have paused half-way; let it resume on its untouched store.
            if hadLiveStore { try? await hooks.reload(layout.live) }
            throw StoreBackupError.restoreRefused(reason: "the app's willSwap hook failed (\(error)); the live store was not touched")
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
            throw await rollBack(after: error, backupName: backupName, hadLiveStore: hadLiveStore)
        }

        // 3. Commit: `_Old` goes only once the journal says so.
        try journal(.committing)
        TestPausePoint.reach("before-cleanup")
        try swapper.removeOld()
        RestoreJournal.remove(at: layout.journal)
        throttle.report(BackupProgress(phase: .done), force: true)
        return RestoreResult(backupName: backupName, storesDirectory: layout.live,
                             databasesChecked: extracted.databases, fileCount: extracted.files,
                             warning: extracted.unverified ? Extractor.unverifiedWarning : nil)
    }

    /// The app rejected the restored store: put the old one back, reload it, tell the app.
    /// Returns the error the restore throws.
    private func rollBack(after reloadError: Error, backupName: String, hadLiveStore: Bool) async -> Error {
        let report: SetAsideReport?
        do {
            try RestoreJournal(phase: .rollingBack, backupName: backupName, hadLiveStore: hadLiveStore).save(to: layout.journal)
            report = try swapper.putBackOld(hadLiveStore: hadLiveStore, keepRejected: true)
            RestoreJournal.remove(at: layout.journal)
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
        await hooks.didRollback(reloadError)
        return StoreBackupError.reloadFailed(reason: reason, rolledBack: hadLiveStore)
    }

    /// Before the swap: the unpacked copy and its journal go; the live store was never touched.
    private func discardExtracted() {
        try? swapper.removeNew()
        RestoreJournal.remove(at: layout.journal)
    }
}
