import Foundation
import Logging

extension RestoreTransaction {
    /// Brings the store back to a whole state after a restore was killed, reading what it
    /// was doing from its journal. Callers hold the store's lock. Safe to run again after
    /// a crash part-way through.
    static func recover(_ layout: StoreLayout, now: Date = Date()) throws -> RecoveryOutcome {
        let swapper = StoreSwapper(layout: layout)
        guard let journal = RestoreJournal.load(from: layout.journal) else {
            // A journal that cannot be read is left alone only if nothing is mid-way.
            if FileSystem.fileExists(layout.journal) && FileSystem.fileExists(layout.old) && !FileSystem.fileExists(layout.live) {
                try swapper.moveOldIntoPlace()
                RestoreJournal.remove(at: layout.journal)
                return .rolledBack(backup: "unknown")
            }
            if FileSystem.fileExists(layout.journal) { RestoreJournal.remove(at: layout.journal) }
            return .nothingToDo
        }
        let name = journal.backupName
        if journal.undo == true { return try recoverUndo(layout, journal) }
        switch journal.phase {
        case .extracting:
            try swapper.removeNew()
            RestoreJournal.remove(at: layout.journal)
            return .discardedUnfinishedRestore(backup: name)
        case .swapping, .reloading, .rollingBack:
            if journal.hadLiveStore || journal.phase == .rollingBack {
                // Only a store the app rejected is kept; one that was merely interrupted
                // is a copy of a backup that still exists, so it goes.
                try swapper.putBackOld(hadLiveStore: journal.hadLiveStore, keepRejected: journal.phase == .rollingBack)
                RestoreJournal.remove(at: layout.journal)
                return .rolledBack(backup: name)
            }
            // There was no store before: the checked restore is the only whole state.
            try swapper.moveNewIntoPlace()
            RestoreJournal.remove(at: layout.journal)
            return .completedRestore(backup: name)
        case .committing:
            // A store dropped here for want of space is not reported: status shows none kept.
            _ = try ReplacedStoreKeeper(layout: layout).commitRestore(
                backupName: name, hadLiveStore: journal.hadLiveStore, keepUntil: journal.keepReplacedUntil, now: now)
            RestoreJournal.remove(at: layout.journal)
            return .finishedCleanup(backup: name)
        case .startingApp:
            RestoreJournal.remove(at: layout.journal)
            return .appStartPending(backup: name)
        }
    }

    /// A restore that had stopped the app died before starting it: run the start command
    /// now when it is known, else say the app may still be stopped.
    static func startAppAfterInterruptedRestore(_ startCommand: String?, logger: Logger) {
        guard let startCommand else {
            logger.warning("the interrupted restore had stopped the app with its stop command and did not start it again; start the app")
            return
        }
        logger.notice("the interrupted restore had stopped the app; starting it (start command)")
        if let failure = ShellCommand.run(startCommand, timeout: AppCommands.defaultTimeout).failure {
            logger.error("the start command failed (\(failure)); start the app")
        }
    }
}
