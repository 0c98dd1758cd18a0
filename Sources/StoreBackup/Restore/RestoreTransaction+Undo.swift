import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension RestoreTransaction {
    /// Puts the kept `_Replaced` store back in place of the live one, in the journaled
    /// transaction a restore's swap uses: the same lock and recovery first, in-use checks,
    /// stop and start commands, reload hooks, rollback when the reload throws (the kept store
    /// goes back to `_Replaced`), and the same recovery after a crash at any step. At the
    /// commit the store it replaces (the restored one) is removed, with the record: there is
    /// then nothing left to undo.
    func undo() async throws -> UndoResult {
        if let info = try? FileSystem.lstatInfo(layout.live), info.st_mode & S_IFMT != S_IFDIR {
            throw StoreBackupError.restoreRefused(
                reason: "\(layout.live) is not a directory; undo replaces a stores directory and will not remove anything else")
        }
        let lock = try StoreLock(storesDirectory: layout.live, purpose: "undo")
        defer { withExtendedLifetime(lock) {} }
        _ = try layout.recoverIfNeeded(logger: logger, startCommand: appCommands?.start, now: now())
        guard let kept = layout.replacedStore() else {
            throw StoreBackupError.restoreRefused(
                reason:
                    "nothing to undo: no replaced store is kept beside \(layout.live) (an undo already put it back, its time ran out, or the restore did not keep it)"
            )
        }
        for leftover in [layout.new, layout.old] where FileSystem.fileExists(leftover) {
            throw StoreBackupError.restoreRefused(
                reason: "\(leftover) already exists and is not from an interrupted restore; move it away first")
        }
        if appCommands == nil && options.checkStoreInUseEarly && !options.allowStoreInUse { _ = try checkNotInUse(afterStop: false) }
        // Checked while the app still runs: a damaged kept store is refused before anything
        // stops, and the reload after the swap need not read the same bytes again.
        do {
            try await runBlocking(name: "storebackup-undo-check") { _ in try DatabaseCheck.quickCheckAll(in: kept.path, recording: true) }
        } catch {
            throw StoreBackupError.restoreRefused(reason: "the kept store \(kept.path) fails its check (\(error)); nothing was changed")
        }
        let plan = SwapPlan(backupName: kept.replacedBy ?? "unknown", hadLiveStore: FileSystem.fileExists(layout.live), undo: true)
        let outcome = try await swapWithApp(plan, throttle: ProgressThrottle(nil))
        return UndoResult(
            storesDirectory: layout.live, putBack: kept, storeInUseWarning: outcome.inUseWarning, appDowntime: outcome.downtime)
    }
}
