import Foundation
import Logging

extension StoreLayout {
    /// Removes dead commands' temporaries beside the store and in `TMPDIR`, then runs
    /// recovery when a restore journal is present, telling `logger` what it did (notice).
    /// When that restore had stopped the app, the app's start command (the journal's, else
    /// `startCommand`) is run, or the log says the app may still be stopped. Last, a kept
    /// replaced store whose time is up at `now` is removed.
    /// Callers hold the store lock.
    func recoverIfNeeded(logger: Logger, startCommand: String? = nil, now: Date = Date()) throws -> RecoveryOutcome {
        ScratchFiles.sweep(besideStoreIn: parent)
        var outcome = RecoveryOutcome.nothingToDo
        if FileSystem.fileExists(journal) {
            let interrupted = RestoreJournal.load(from: journal)
            outcome = try RestoreTransaction.recover(self, now: now)
            if let message = outcome.message {
                logger.notice("\(message)", metadata: ["store": "\(live)"])
            }
            if let interrupted, interrupted.appStopped == true {
                RestoreTransaction.startAppAfterInterruptedRestore(interrupted.startCommand ?? startCommand, logger: logger)
            }
        }
        if let removed = try ReplacedStoreKeeper(layout: self).removeExpired(now: now) {
            logger.notice("\(removed)", metadata: ["store": "\(live)"])
        }
        return outcome
    }
}
