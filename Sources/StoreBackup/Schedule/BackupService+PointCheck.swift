import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

extension BackupService {
    /// The check after a point (an incremental): the destination's copy of the archive just
    /// uploaded, read back alone (in place for a local folder), must have the SHA-256 of the
    /// archive that was sent, which create proved against its base before publishing. Where
    /// the server checked the upload against the bytes sent
    /// (``BackupDestination/checksUploadedBytes``, S3's `Content-MD5`), that check stands and
    /// nothing is read back. Nothing of the chain is read: the full check of a chain is the
    /// restore drills' (`verify:`).
    /// Records the outcome as ``verifyJustMade(_:backup:at:log:)`` does; a failure discards
    /// the chain state for `destination`.
    func verifyPointJustMade(_ job: StoreJob, backup: BackupResult, at destination: any BackupDestination, log: Logger)
        async throws -> StoreBackupError?
    {
        let problem: String?
        do {
            let serverChecked =
                backup.sentSHA256 != nil && destination.localPath(of: backup.name) == nil && destination.checksUploadedBytes
            let found = serverChecked ? backup.sentSHA256 : try await Self.sha256(of: backup.name, size: backup.size, at: destination)
            problem = found == backup.sentSHA256 ? nil : "the copy at the destination differs from the archive that was sent"
        } catch let error as StoreBackupError where error == .cancelled {
            throw error
        } catch {
            problem = "cannot read back the copy at the destination: \(Self.describe(error))"
        }
        if Task.isCancelled { throw StoreBackupError.cancelled }
        let name = destination.displayName
        BackupMetrics.recordVerify(
            store: job.name, destination: name, backup: backup.name, ok: problem == nil, trigger: "after-create", at: Date())
        recordPointCheck(job: job, destination: name, backup: backup.name, problem: problem, log: log)
        guard let problem else {
            log.info("point checked against what was sent", metadata: ["backup": "\(backup.name)"])
            return nil
        }
        ChainFolder(storesDirectory: job.storesDirectory, destination: name).remove()
        return StoreBackupError.verificationFailed(backup: backup.name, problem: problem)
    }

    /// The SHA-256 of one backup at `destination`: read in place, or downloaded alone.
    static func sha256(of name: String, size: Int64, at destination: any BackupDestination) async throws -> String {
        if let local = destination.localPath(of: name) {
            return try FileDigest.sha256(file: local, length: Int64(try FileSystem.lstatInfo(local).st_size))
        }
        let copy = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "point-check", suffix: ".zip")
        defer { unlink(copy) }
        try await destination.download(name, to: copy, progress: nil)
        return try FileDigest.sha256(file: copy, length: Int64(try FileSystem.lstatInfo(copy).st_size))
    }

    private func recordPointCheck(job: StoreJob, destination: String, backup: String, problem: String?, log: Logger) {
        do {
            try stateStore.update(job.name, default: initialState(job)) { state in
                let at = now()
                if let problem {
                    state.lastVerifyFailure = BackupState.Verification(
                        at: at, backups: [backup], destination: destination, trigger: "after-create", error: problem)
                } else {
                    state.lastVerifySuccess = BackupState.Verification(
                        at: at, backups: [backup], destination: destination, trigger: "after-create")
                }
            }
        } catch {
            log.warning("cannot write the state file", metadata: ["error": "\(error)"])
        }
    }
}
