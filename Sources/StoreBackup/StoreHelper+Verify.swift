import Foundation

extension StoreHelper {
    /// Checks backups end to end without touching the store: every CRC, every file against
    /// its manifest checksum, and `PRAGMA integrity_check` on each database, in a scratch
    /// folder that is removed afterwards.
    ///
    /// A damaged backup is reported in its ``VerificationResult`` (`ok == false`, with the
    /// problem), not thrown, so one bad backup does not hide the others. Encrypted backups are
    /// opened with the helper's ``passwords``.
    ///
    /// - Parameters:
    ///   - selection: `.latest` (the default), `.named(name)` or `.all`.
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Throws: ``StoreBackupError/cancelled`` when the calling task is cancelled,
    ///   ``StoreBackupError/noBackups(destination:)``,
    ///   ``StoreBackupError/backupNotFound(name:destination:)``, or a destination's error.
    public func verify(
        _ selection: BackupSelection = .latest, progress: ProgressHandler? = nil
    ) async throws -> [VerificationResult] {
        let progress = ProgressPlan.stamping(ProgressPlan.verify, progress)
        let results: [VerificationResult]
        do {
            var verifier = BackupVerifier(destination: destination, passwords: passwords)
            verifier.allowUnverified = allowUnverified
            verifier.allowOutsideLinks = allowOutsideLinks
            results = try await verifier.verify(selection, progress: progress)
        } catch is CancellationError {
            throw StoreBackupError.cancelled
        }
        // A cancelled check reports its backup as failed; that says nothing about the backup.
        if Task.isCancelled { throw StoreBackupError.cancelled }
        return results
    }
}
