import Foundation
import Logging

extension StoreLayout {
    /// Removes dead commands' temporaries beside the store and in `TMPDIR`, then runs
    /// recovery when a restore journal is present, telling `logger` what it did (notice).
    /// When that restore had stopped the app, the app's start command (the journal's, else
    /// `startCommand`) is run, or the log says the app may still be stopped.
    /// Callers hold the store lock.
    func recoverIfNeeded(logger: Logger, startCommand: String? = nil) throws -> RecoveryOutcome {
        ScratchFiles.sweep(besideStoreIn: parent)
        guard FileSystem.fileExists(journal) else { return .nothingToDo }
        let interrupted = RestoreJournal.load(from: journal)
        let outcome = try RestoreTransaction.recover(self)
        if let message = outcome.message {
            logger.notice("\(message)", metadata: ["store": "\(live)"])
        }
        if let interrupted, interrupted.appStopped == true {
            RestoreTransaction.startAppAfterInterruptedRestore(interrupted.startCommand ?? startCommand, logger: logger)
        }
        return outcome
    }
}
