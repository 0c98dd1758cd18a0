import Foundation
import Logging

extension BackupService {
    /// For a scheduled run of an incremental job: the last point's name when the store still
    /// looks as it did just before that point read it, at every destination's chain, and the
    /// safety net (``IncrementalPolicy/fullScanEvery``) is not due; nil when a point is made.
    /// Reads the chain states and stats the store; reads no content and asks no destination.
    func pointNotNeeded(_ job: StoreJob, log: Logger) -> String? {
        guard let policy = job.incremental, policy.fullScanEvery > 0, !policy.forceFull else { return nil }
        var last: (name: String, fingerprint: StoreFingerprint)?
        for value in job.allDestinations {
            guard let destination = try? resolveDestination(value, destinationOptions(logging: log)),
                let state = ChainFolder(storesDirectory: job.storesDirectory, destination: destination.displayName).peek(),
                state.spooled == nil, let fingerprint = state.fingerprint,
                !fingerprint.isRacy(windowNanoseconds: racyWindowNanoseconds),
                now().timeIntervalSince(state.scannedAt ?? state.createdAt) < policy.fullScanEvery
            else { return nil }
            // Mirrors share one point; one that missed it needs a new one.
            if let last, last.fingerprint.digest != fingerprint.digest { return nil }
            last = (state.backupName, fingerprint)
        }
        guard let last, last.fingerprint.stillMatches(storesDirectory: job.storesDirectory) else { return nil }
        return last.name
    }
}
