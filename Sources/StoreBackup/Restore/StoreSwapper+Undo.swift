import Foundation

/// The renames of an undo: the kept `_Replaced` store takes the place `_New` has in a restore.
extension StoreSwapper {
    /// live → `_Old` (when there is one), `_Replaced` → live.
    func swapInReplaced(hadLiveStore: Bool) throws {
        if hadLiveStore { try FileSystem.rename(from: layout.live, to: layout.old) }
        TestPausePoint.reach("between-renames")
        try FileSystem.rename(from: layout.replaced, to: layout.live)
        try FileSystem.fsync(path: layout.parent)
    }

    /// Undoes ``swapInReplaced(hadLiveStore:)`` from wherever it stopped: a live kept store
    /// goes back to `_Replaced`, `_Old` (the restored store) goes live. Safe to run again
    /// after a crash part-way through.
    func putBackReplaced(hadLiveStore: Bool) throws {
        if FileSystem.fileExists(layout.old) {
            // The swap began: whatever is live is the kept store.
            if FileSystem.fileExists(layout.live) { try FileSystem.rename(from: layout.live, to: layout.replaced) }
            TestPausePoint.reach("during-rollback")
            try FileSystem.rename(from: layout.old, to: layout.live)
        } else if !hadLiveStore && FileSystem.fileExists(layout.live) && !FileSystem.fileExists(layout.replaced) {
            try FileSystem.rename(from: layout.live, to: layout.replaced)
        }
        try FileSystem.fsync(path: layout.parent)
    }
}
