import Foundation

/// What one transaction swaps in, and what its journal records: an unpacked backup
/// (`_New`) or, for an undo, the kept `_Replaced` store.
struct SwapPlan: Sendable {
    /// The backup restored, or for an undo the one whose restore is undone.
    var backupName: String
    var hadLiveStore: Bool
    /// The kept `_Replaced` store goes live instead of `_New`.
    var undo = false
    /// A restore's commit keeps the store it replaces this long; nil drops it (and an undo keeps nothing).
    var keepReplaced: TimeInterval? = nil

    /// The journal record for `phase`; `keepUntil` goes into a restore's commit record.
    func journal(_ phase: RestoreJournal.Phase, appStopped: Bool, startCommand: String?, keepUntil: Date? = nil) -> RestoreJournal {
        var journal = RestoreJournal(
            phase: phase, backupName: backupName, hadLiveStore: hadLiveStore,
            appStopped: appStopped ? true : nil, startCommand: appStopped ? startCommand : nil)
        journal.undo = undo ? true : nil
        journal.keepReplacedUntil = keepUntil
        return journal
    }
}

/// How a swap ended, for the result: the in-use warning, what the commit kept, the app's downtime.
struct SwapOutcome: Sendable {
    var inUseWarning: String?
    /// Set once committed (a restore); nil before, and for an undo.
    var kept: ReplacedStoreKeeper.Outcome?
    var downtime: AppDowntime?
}
