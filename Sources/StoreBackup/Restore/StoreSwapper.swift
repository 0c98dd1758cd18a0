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

    /// One line for a log or terminal; nil when there was nothing to do.
    public var message: String? {
        switch self {
        case .nothingToDo: return nil
        case .discardedUnfinishedRestore(let name): return "an interrupted restore of \"\(name)\" was discarded; the store was not changed"
        case .rolledBack(let name): return "an interrupted restore of \"\(name)\" was rolled back; the previous store is live"
        case .completedRestore(let name): return "an interrupted restore of \"\(name)\" was completed"
        case .finishedCleanup(let name): return "an interrupted restore of \"\(name)\" had succeeded; its cleanup is finished"
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

/// The rename steps of a restore, each recorded in the journal first.
///
/// Power-loss order: the unpacked tree is synced before the `swapping` record; the two
/// renames are made durable (fsync of the parent folder) before the `reloading` record;
/// `_Old` is removed only after the `committing` record. Set-aside names never collide:
/// an earlier `_FailedRestore` is first moved to a unique scratch name, then removed.
struct StoreSwapper {
    let layout: StoreLayout

    func journal(_ phase: RestoreJournal.Phase, backup: String, hadLiveStore: Bool) throws {
        try RestoreJournal(phase: phase, backupName: backup, hadLiveStore: hadLiveStore).save(to: layout.journal)
    }

    /// live → `_Old` (when there is one), `_New` → live. The caller has synced `_New`.
    func swapIn(backup: String, hadLiveStore: Bool) throws {
        try journal(.swapping, backup: backup, hadLiveStore: hadLiveStore)
        TestPausePoint.reach("before-swap")
        if hadLiveStore { try FileSystem.rename(from: layout.live, to: layout.old) }
        TestPausePoint.reach("between-renames")
        try FileSystem.rename(from: layout.new, to: layout.live)
        try FileSystem.fsync(path: layout.parent)
        try journal(.reloading, backup: backup, hadLiveStore: hadLiveStore)
        TestPausePoint.reach("before-reload")
    }

    /// The restore is accepted: drop `_Old` and the journal.
    func commit(backup: String, hadLiveStore: Bool) throws {
        try journal(.committing, backup: backup, hadLiveStore: hadLiveStore)
        TestPausePoint.reach("before-cleanup")
        try FileSystem.removeTree(layout.old)
        RestoreJournal.remove(at: layout.journal)
    }

    /// The restored store is moved to `_FailedRestore` and `_Old` becomes live again.
    /// Safe to run again (by ``recover()``) after a crash part-way through.
    @discardableResult
    func rollBack(backup: String, hadLiveStore: Bool) throws -> SetAsideReport? {
        try journal(.rollingBack, backup: backup, hadLiveStore: hadLiveStore)
        return try finishRollBack(hadLiveStore: hadLiveStore, keepRejected: true)
    }

    /// Brings the store back to a whole state after a restore was killed.
    func recover() throws -> RecoveryOutcome {
        guard let journal = RestoreJournal.load(from: layout.journal) else {
            // A journal that cannot be read is left alone only if nothing is mid-way.
            if FileSystem.fileExists(layout.journal) && FileSystem.fileExists(layout.old) && !FileSystem.fileExists(layout.live) {
                try FileSystem.rename(from: layout.old, to: layout.live)
                try FileSystem.fsync(path: layout.parent)
                RestoreJournal.remove(at: layout.journal)
                return .rolledBack(backup: "unknown")
            }
            if FileSystem.fileExists(layout.journal) { RestoreJournal.remove(at: layout.journal) }
            return .nothingToDo
        }
        let name = journal.backupName
        switch journal.phase {
        case .extracting:
            try FileSystem.removeTree(layout.new)
            RestoreJournal.remove(at: layout.journal)
            return .discardedUnfinishedRestore(backup: name)
        case .swapping, .reloading, .rollingBack:
            if journal.hadLiveStore || journal.phase == .rollingBack {
                // Only a store the app rejected is kept; one that was merely interrupted
                // is a copy of a backup that still exists, so it goes.
                try finishRollBack(hadLiveStore: journal.hadLiveStore, keepRejected: journal.phase == .rollingBack)
                return .rolledBack(backup: name)
            }
            // There was no store before: the checked restore is the only whole state.
            if !FileSystem.fileExists(layout.live) && FileSystem.fileExists(layout.new) {
                try FileSystem.rename(from: layout.new, to: layout.live)
                try FileSystem.fsync(path: layout.parent)
            }
            RestoreJournal.remove(at: layout.journal)
            return .completedRestore(backup: name)
        case .committing:
            try FileSystem.removeTree(layout.old)
            RestoreJournal.remove(at: layout.journal)
            return .finishedCleanup(backup: name)
        }
    }

    /// Puts the old store back from wherever a rollback (or a swap) stopped: a live store
    /// that is not the old one goes to `_FailedRestore` (`keepRejected`) or away, `_Old`
    /// goes live, `_New` goes away.
    private func finishRollBack(hadLiveStore: Bool, keepRejected: Bool) throws -> SetAsideReport? {
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
        RestoreJournal.remove(at: layout.journal)
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
