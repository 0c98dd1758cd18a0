import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What happened to one backup in a ``BackupCopier`` run.
public struct BackupCopyOutcome: Sendable, Equatable, Codable {
    /// How the copy of one backup ended.
    public enum Status: String, Sendable, Codable {
        /// Copied now, and the copy checked by the target (see ``BackupDestination/upload(file:as:progress:)``).
        case copied
        /// A backup of that name and size was already at the target; nothing was written.
        case alreadyThere = "already there"
        /// Not copied; ``BackupCopyOutcome/error`` says why.
        case failed
    }

    /// The backup's name (the same at both ends).
    public var name: String
    /// Its size in bytes at the source.
    public var size: Int64
    /// How it ended.
    public var status: Status
    /// Why it failed, for ``Status/failed``.
    public var error: String?

    /// An outcome; ``BackupCopier`` makes these.
    public init(name: String, size: Int64, status: Status, error: String? = nil) {
        self.name = name
        self.size = size
        self.status = status
        self.error = error
    }
}

/// Copies finished backups from one destination to another without rebuilding them.
///
/// Each backup is read in place from a local folder, or downloaded to a temporary in
/// `TMPDIR`, then published with the target's `upload`, which checks the copy the way
/// that destination can (Content-MD5 and ETag on S3, a read-back on WebDAV, the size on
/// SFTP, the content hash on Dropbox). A copy never overwrites: a backup already at the
/// target under the same name and size counts as copied (so running again is harmless);
/// the same name with another size is an error for that backup.
public struct BackupCopier: Sendable {
    /// Where backups are read.
    public let source: any BackupDestination
    /// Where they are published.
    public let target: any BackupDestination

    /// A copier from `source` to `target`.
    public init(from source: any BackupDestination, to target: any BackupDestination) {
        self.source = source
        self.target = target
    }

    /// Copies one backup, named or `latest` (resolved at the source).
    ///
    /// - Throws: ``StoreBackupError/backupNotFound(name:destination:)`` or
    ///   ``StoreBackupError/noBackups(destination:)`` when the source lacks it, and any
    ///   error listing either destination. A failed copy is an outcome, not a throw.
    public func copy(_ nameOrLatest: String, progress: ProgressHandler? = nil) async throws -> BackupCopyOutcome {
        let backup = try await source.resolve(nameOrLatest)
        let existing = try await target.listBackups()
        return await copy(backup, existing: existing, progress: progress)
    }

    /// Copies every backup at the source that the target lacks, oldest first; backups
    /// already there are reported as ``BackupCopyOutcome/Status/alreadyThere``.
    public func copyAll(progress: ProgressHandler? = nil) async throws -> [BackupCopyOutcome] {
        let backups = try await source.sortedBackups().reversed()
        let existing = try await target.listBackups()
        var outcomes: [BackupCopyOutcome] = []
        for backup in backups {
            // The library's one error type, also for cancellation.
            if Task.isCancelled { throw StoreBackupError.cancelled }
            outcomes.append(await copy(backup, existing: existing, progress: progress))
        }
        return outcomes
    }

    private func copy(_ backup: BackupListing, existing: [BackupListing], progress: ProgressHandler?) async -> BackupCopyOutcome {
        if let present = existing.first(where: { $0.name == backup.name }) {
            return sameSizeOutcome(backup, present: present)
        }
        do {
            try await transfer(backup, progress: progress)
            return BackupCopyOutcome(name: backup.name, size: backup.size, status: .copied)
        } catch StoreBackupError.backupExists {
            // Another copier published it meanwhile: judge what is there now.
            let present = try? await target.listBackups().first(where: { $0.name == backup.name })
            if let present { return sameSizeOutcome(backup, present: present) }
            return failed(backup, StoreBackupError.backupExists(name: backup.name, destination: target.displayName))
        } catch {
            return failed(backup, error)
        }
    }

    /// The source's file (in place, or a fresh download), published at the target, then
    /// listed there again to see the size arrived whole.
    private func transfer(_ backup: BackupListing, progress: ProgressHandler?) async throws {
        var file = source.localPath(of: backup.name)
        var scratch: String?
        defer { if let scratch { unlink(scratch) } }
        if file == nil {
            ScratchFiles.sweep(ScratchFiles.temporaryDirectory)
            let path = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "copy", suffix: ".zip")
            scratch = path
            try await source.download(backup.name, to: path, progress: progress)
            let downloaded = Int64(try FileSystem.lstatInfo(path).st_size)
            guard downloaded == backup.size else {
                throw StoreBackupError.destination(
                    destination: source.displayName,
                    reason: "\"\(backup.name)\" downloaded as \(downloaded) bytes, listed as \(backup.size)")
            }
            file = path
        }
        try await target.upload(file: file!, as: backup.name, progress: progress)
        guard let arrived = try await target.listBackups().first(where: { $0.name == backup.name }) else {
            throw StoreBackupError.destination(destination: target.displayName, reason: "\"\(backup.name)\" is not listed after the upload")
        }
        guard arrived.size == backup.size else {
            throw StoreBackupError.destination(
                destination: target.displayName,
                reason: "\"\(backup.name)\" arrived as \(arrived.size) bytes, the source has \(backup.size)")
        }
    }

    private func sameSizeOutcome(_ backup: BackupListing, present: BackupListing) -> BackupCopyOutcome {
        if present.size == backup.size {
            return BackupCopyOutcome(name: backup.name, size: backup.size, status: .alreadyThere)
        }
        return failed(
            backup,
            StoreBackupError.destination(
                destination: target.displayName,
                reason:
                    "a different backup named \"\(backup.name)\" is already there (\(present.size) bytes, the source has \(backup.size)); refusing to overwrite it"
            ))
    }

    private func failed(_ backup: BackupListing, _ error: Error) -> BackupCopyOutcome {
        BackupCopyOutcome(name: backup.name, size: backup.size, status: .failed, error: "\(error)")
    }
}
