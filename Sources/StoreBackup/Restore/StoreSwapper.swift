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

/// The rename steps of a restore, each recorded in the journal first.
struct StoreSwapper {
    let layout: StoreLayout

    func journal(_ phase: RestoreJournal.Phase, backup: String, hadLiveStore: Bool) throws {
        try RestoreJournal(phase: phase, backupName: backup, hadLiveStore: hadLiveStore).save(to: layout.journal)
    }

    /// live → `_Old` (when there is one), `_New` → live.
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
    /// Safe to run again after a crash part-way through.
    func rollBack(backup: String, hadLiveStore: Bool) throws {
        try journal(.rollingBack, backup: backup, hadLiveStore: hadLiveStore)
        if FileSystem.fileExists(layout.live) && (FileSystem.fileExists(layout.old) || !hadLiveStore) {
            try moveAsideFailed()
        }
        TestPausePoint.reach("during-rollback")
        if FileSystem.fileExists(layout.old) { try FileSystem.rename(from: layout.old, to: layout.live) }
        if FileSystem.fileExists(layout.new) { try FileSystem.removeTree(layout.new) }
        try FileSystem.fsync(path: layout.parent)
        RestoreJournal.remove(at: layout.journal)
    }

    /// Brings the store back to a whole state after a restore was killed.
    func recover() throws -> RecoveryOutcome {
        guard let journal = RestoreJournal.load(from: layout.journal) else {
            // A journal that cannot be read is left alone only if nothing is mid-way.
            if FileSystem.fileExists(layout.journal) && FileSystem.fileExists(layout.old) && !FileSystem.fileExists(layout.live) {
                try FileSystem.rename(from: layout.old, to: layout.live)
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
            if journal.hadLiveStore {
                // The old store exists either live (swap not begun) or as _Old: put it back.
                if FileSystem.fileExists(layout.old) {
                    if FileSystem.fileExists(layout.live) { try moveAsideFailed() }
                    try FileSystem.rename(from: layout.old, to: layout.live)
                }
                if FileSystem.fileExists(layout.new) { try FileSystem.removeTree(layout.new) }
                try FileSystem.fsync(path: layout.parent)
                RestoreJournal.remove(at: layout.journal)
                return .rolledBack(backup: name)
            }
            // There was no store before: the checked restore is the only whole state.
            if !FileSystem.fileExists(layout.live) && FileSystem.fileExists(layout.new) {
                try FileSystem.rename(from: layout.new, to: layout.live)
                try FileSystem.fsync(path: layout.parent)
            }
            RestoreJournal.remove(at: layout.journal)
            return journal.phase == .rollingBack ? .rolledBack(backup: name) : .completedRestore(backup: name)
        case .committing:
            try FileSystem.removeTree(layout.old)
            RestoreJournal.remove(at: layout.journal)
            return .finishedCleanup(backup: name)
        }
    }

    /// Moves the live (rejected) store to `_FailedRestore`, keeping an earlier one under a dated name.
    private func moveAsideFailed() throws {
        if FileSystem.fileExists(layout.failed) {
            let stamp = Int(Date().timeIntervalSince1970)
            try FileSystem.rename(from: layout.failed, to: layout.failed + "-\(stamp)")
        }
        try FileSystem.rename(from: layout.live, to: layout.failed)
    }
}
