import Foundation

/// What recovery found and did.
public enum RecoveryOutcome: Sendable, Equatable {
    /// No restore was interrupted; nothing was changed.
    case nothingToDo
    /// An unfinished extraction was discarded; the live store was never touched.
    case discardedUnfinishedRestore(backup: String)
    /// A restore stopped mid-swap or mid-reload; the previous store is live again.
    case rolledBack(backup: String)
    /// A restore onto a store that did not exist stopped after its checks passed; the restored store is live.
    case completedRestore(backup: String)
    /// A restore had succeeded and only cleanup was left; it is done.
    case finishedCleanup(backup: String)
    /// A restore had left the store whole (committed or rolled back) but died before it ran
    /// the app's start command.
    case appStartPending(backup: String)
    /// An undo of the restore of `backup` stopped before its commit; the restored store is
    /// live again and the replaced one kept, as before the undo.
    case undoRolledBack(backup: String)
    /// An undo of the restore of `backup` had put the replaced store back and only cleanup
    /// was left; it is done.
    case undoFinished(backup: String)

    /// One line for a log or terminal; nil when there was nothing to do.
    public var message: String? {
        switch self {
        case .nothingToDo: return nil
        case .discardedUnfinishedRestore(let name): return "an interrupted restore of \"\(name)\" was discarded; the store was not changed"
        case .rolledBack(let name): return "an interrupted restore of \"\(name)\" was rolled back; the previous store is live"
        case .completedRestore(let name): return "an interrupted restore of \"\(name)\" was completed"
        case .finishedCleanup(let name): return "an interrupted restore of \"\(name)\" had succeeded; its cleanup is finished"
        case .appStartPending(let name):
            return "an interrupted restore of \"\(name)\" had left the store whole but not started the app again"
        case .undoRolledBack(let name):
            return
                "an interrupted undo of the restore of \"\(name)\" was rolled back; the restored store is live and the replaced one is kept"
        case .undoFinished(let name):
            return "an interrupted undo of the restore of \"\(name)\" had put the replaced store back; its cleanup is finished"
        }
    }
}

/// Where a rejected restore went, for the message that reports it.
struct SetAsideReport: Sendable {
    /// `<store>_FailedRestore`, now holding the rejected store.
    var failedPath: String
    var failedBytes: Int64
    /// The size of the earlier `_FailedRestore` that was removed (only the newest is kept).
    var removedEarlierBytes: Int64?

    var description: String {
        var text = "the rejected store is kept in \(failedPath) (\(ByteCountText.describe(failedBytes)))"
        if let removed = removedEarlierBytes {
            text += "; the earlier one there (\(ByteCountText.describe(removed))) was removed, only the newest is kept"
        }
        return text
    }
}

/// The renames of a restore, each made durable (fsync of the parent folder). It writes no
/// journal: ``RestoreTransaction`` records each step before asking for it, and decides from
/// the journal what recovery does.
///
/// Set-aside names never collide: an earlier `_FailedRestore` is first moved to a unique
/// scratch name, then removed.
struct StoreSwapper {
    let layout: StoreLayout

    /// live → `_Old` (when there is one), `_New` → live. The caller has synced `_New`.
    func swapIn(hadLiveStore: Bool) throws {
        if hadLiveStore { try FileSystem.rename(from: layout.live, to: layout.old) }
        TestPausePoint.reach("between-renames")
        try FileSystem.rename(from: layout.new, to: layout.live)
        try FileSystem.fsync(path: layout.parent)
    }

    /// The restore is accepted: the previous store goes.
    func removeOld() throws {
        try FileSystem.removeTree(layout.old)
    }

    /// The unpacked (or half-unpacked) backup goes; the live store was never touched.
    func removeNew() throws {
        try FileSystem.removeTree(layout.new)
    }

    /// `_New` → live, for a restore onto a store that did not exist, stopped after its
    /// checks passed: the restored store is the only whole state.
    func moveNewIntoPlace() throws {
        guard !FileSystem.fileExists(layout.live) && FileSystem.fileExists(layout.new) else { return }
        try FileSystem.rename(from: layout.new, to: layout.live)
        try FileSystem.fsync(path: layout.parent)
    }

    /// `_Old` → live, when no live store is in the way.
    func moveOldIntoPlace() throws {
        try FileSystem.rename(from: layout.old, to: layout.live)
        try FileSystem.fsync(path: layout.parent)
    }

    /// Puts the old store back from wherever a rollback (or a swap) stopped: a live store
    /// that is not the old one goes to `_FailedRestore` (`keepRejected`) or away, `_Old`
    /// goes live, `_New` goes away. Safe to run again after a crash part-way through.
    @discardableResult
    func putBackOld(hadLiveStore: Bool, keepRejected: Bool) throws -> SetAsideReport? {
        var discard: String?
        // The live folder is the restored store unless the swap had not begun (old still live).
        let liveIsRestored = FileSystem.fileExists(layout.live) && (FileSystem.fileExists(layout.old) || !hadLiveStore)
        if liveIsRestored {
            if keepRejected {
                discard = try moveAsideFailed()
            } else {
                // Under a scratch name: if this is interrupted, the next command's sweep finishes it.
                discard = ScratchFiles.path(in: layout.parent, purpose: "interrupted-restore")
                try FileSystem.rename(from: layout.live, to: discard!)
            }
        }
        TestPausePoint.reach("during-rollback")
        if FileSystem.fileExists(layout.old) { try FileSystem.rename(from: layout.old, to: layout.live) }
        if FileSystem.fileExists(layout.new) { try FileSystem.removeTree(layout.new) }
        try FileSystem.fsync(path: layout.parent)
        var report: SetAsideReport?
        if liveIsRestored && keepRejected {
            report = SetAsideReport(failedPath: layout.failed, failedBytes: FileSystem.treeSize(layout.failed))
            if let discard { report?.removedEarlierBytes = FileSystem.treeSize(discard) }
        }
        if let discard { try? FileSystem.removeTree(discard) }
        return report
    }

    /// Moves the live (rejected) store to `_FailedRestore`. An earlier one is first moved to
    /// a unique scratch name (returned) so the two can never collide.
    private func moveAsideFailed() throws -> String? {
        var earlier: String?
        if FileSystem.fileExists(layout.failed) {
            let aside = ScratchFiles.path(in: layout.parent, purpose: "earlier-failed-restore")
            try FileSystem.rename(from: layout.failed, to: aside)
            earlier = aside
        }
        try FileSystem.rename(from: layout.live, to: layout.failed)
        return earlier
    }
}
