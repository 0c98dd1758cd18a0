import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One restore, once the archive is on this machine: unpack and check into `<store>_New`,
/// make it durable, swap it in, let the app reload, then commit or roll back. Every step
/// is journaled first (``StoreSwapper``), so a crash or power cut at any moment leaves a
/// store the next command makes whole: the old one, or the new one once committed.
struct RestoreTransaction {
    let layout: StoreLayout
    let backupName: String
    let passwords: PasswordProvider?
    let hooks: ReloadHooks
    let throttle: ProgressThrottle
    /// Accept an archive without a manifest (see ``StoreHelper/allowUnverified``).
    var allowUnverified = false

    func run(archive: String) async throws -> RestoreResult {
        let layout = self.layout, backupName = self.backupName, passwords = self.passwords, throttle = self.throttle
        let allowUnverified = self.allowUnverified
        let hadLiveStore = FileSystem.fileExists(layout.live)
        let swapper = StoreSwapper(layout: layout)

        // 1. Unpack and verify beside the live store, then sync it; any failure leaves the
        //    live store untouched.
        let extracted: (databases: [String], files: Int, unverified: Bool)
        do {
            extracted = try await runBlocking(name: "storebackup-restore") { cancel in
                let reader = try ArchiveReader(path: archive, backupName: backupName, passwords: passwords)
                try swapper.journal(.extracting, backup: backupName, hadLiveStore: hadLiveStore)
                TestPausePoint.reach("extracting")
                var extractor = Extractor(reader: reader, cancel: cancel, progress: throttle)
                extractor.allowUnverified = allowUnverified
                let databases = try extractor.extract(into: layout.new)
                try cancel.throwIfCancelled()
                // Every unpacked file and folder reaches the disk before the journal says "swapping".
                try TreeSync.sync(layout.new)
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
        try swapper.swapIn(backup: backupName, hadLiveStore: hadLiveStore)
        throttle.report(BackupProgress(phase: .reloading), force: true)
        do {
            try await hooks.reload(layout.live)
        } catch {
            throw await rollBack(after: error, swapper: swapper, hadLiveStore: hadLiveStore)
        }
        try swapper.commit(backup: backupName, hadLiveStore: hadLiveStore)
        throttle.report(BackupProgress(phase: .done), force: true)
        return RestoreResult(backupName: backupName, storesDirectory: layout.live,
                             databasesChecked: extracted.databases, fileCount: extracted.files,
                             warning: extracted.unverified ? Extractor.unverifiedWarning : nil)
    }

    /// The app rejected the restored store: put the old one back, reload it, tell the app.
    /// Returns the error the restore throws.
    private func rollBack(after reloadError: Error, swapper: StoreSwapper, hadLiveStore: Bool) async -> Error {
        let report: SetAsideReport?
        do {
            report = try swapper.rollBack(backup: backupName, hadLiveStore: hadLiveStore)
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

    private func discardExtracted() {
        try? FileSystem.removeTree(layout.new)
        RestoreJournal.remove(at: layout.journal)
    }
}
