import Foundation

extension RestoreTransaction {
    /// Recovery of an undo killed part-way, from its journal: before the commit record the
    /// store is put back as it was before the undo (the restored store live, the replaced
    /// one kept with its record); from it on, the undo is finished.
    static func recoverUndo(_ layout: StoreLayout, _ journal: RestoreJournal) throws -> RecoveryOutcome {
        let name = journal.backupName
        switch journal.phase {
        case .extracting, .swapping, .reloading, .rollingBack:
            try StoreSwapper(layout: layout).putBackReplaced(hadLiveStore: journal.hadLiveStore)
            RestoreJournal.remove(at: layout.journal)
            return .undoRolledBack(backup: name)
        case .committing:
            try ReplacedStoreKeeper(layout: layout).commitUndo()
            RestoreJournal.remove(at: layout.journal)
            return .undoFinished(backup: name)
        case .startingApp:
            RestoreJournal.remove(at: layout.journal)
            return .appStartPending(backup: name)
        }
    }
}
