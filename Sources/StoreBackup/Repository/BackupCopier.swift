import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What happened to one backup by ``BackupRepository/copy(_:to:progress:)`` or ``BackupRepository/copyAll(to:progress:)``.
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

    /// An outcome; the copy makes these.
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
struct BackupCopier: Sendable {
    /// Where backups are read.
    let source: any BackupDestination
    /// Where they are published.
    let target: any BackupDestination

    /// A copier from `source` to `target`.
    init(from source: any BackupDestination, to target: any BackupDestination) {
        self.source = source
        self.target = target
    }

    /// Copies one backup, named or `latest` (resolved at the source), with the part of its
    /// chain the target lacks (see ``copyChain(_:progress:)``); returns the named backup's outcome.
    ///
    /// - Throws: ``StoreBackupError/backupNotFound(name:destination:)`` or
    ///   ``StoreBackupError/noBackups(destination:)`` when the source lacks it, and any
    ///   error listing either destination. A failed copy is an outcome, not a throw.
    func copy(_ nameOrLatest: String, progress: ProgressHandler? = nil) async throws -> BackupCopyOutcome {
        try await copyChain(nameOrLatest, progress: progress).last!
    }

    /// Copies one backup, named or `latest`, and before it every backup of its chain (the
    /// bases it needs, down to the full) that the target lacks, base first, so the target
    /// never holds an incremental backup without its base. Returns one outcome per backup
    /// copied or failed, the named backup's last (also when it was already there). An
    /// incremental whose base could not be copied, or is at neither end, is not copied.
    ///
    /// - Throws: as ``copy(_:progress:)``.
    func copyChain(_ nameOrLatest: String, progress: ProgressHandler? = nil) async throws -> [BackupCopyOutcome] {
        let backup = try await source.resolve(nameOrLatest)
        let chains = BackupChains(try await source.listBackups())
        let ancestors = chains.ancestors(of: backup.name)
        let ordered = chains.backups.filter { ancestors.contains($0.name) }.reversed() + [backup]
        let outcomes = try await copy(ordered, chains: chains, progress: progress)
        // The bases that were already there need no line; the named backup always has one.
        return outcomes.dropLast().filter { $0.status != .alreadyThere } + [outcomes.last!]
    }

    /// Copies every backup at the source that the target lacks, oldest first (so each base
    /// before the incrementals that need it); backups already there are reported as
    /// ``BackupCopyOutcome/Status/alreadyThere``.
    func copyAll(progress: ProgressHandler? = nil) async throws -> [BackupCopyOutcome] {
        let backups = try await source.sortedBackups()
        return try await copy(backups.reversed(), chains: BackupChains(backups), progress: progress)
    }

    /// Copies `backups` in the order given (bases before what needs them), refusing an
    /// incremental whose base is not at the target by then.
    private func copy(
        _ backups: [BackupListing], chains: BackupChains, progress: ProgressHandler?
    ) async throws -> [BackupCopyOutcome] {
        var existing = try await target.listBackups()
        var outcomes: [BackupCopyOutcome] = []
        var failedNames: Set<String> = []
        for backup in backups {
            // The library's one error type, also for cancellation.
            if Task.isCancelled { throw StoreBackupError.cancelled }
            if !existing.contains(where: { $0.name == backup.name }),
                let missing = missingBase(of: backup, chains: chains, existing: existing, failedNames: failedNames)
            {
                outcomes.append(failed(backup, StoreBackupError.destination(destination: target.displayName, reason: missing)))
                failedNames.insert(backup.name)
                continue
            }
            var outcome = await copy(backup, existing: existing, progress: progress)
            if outcome.status == .copied {
                existing.append(backup)
                outcome = await lockChain(of: backup, outcome)
            }
            if outcome.status == .failed { failedNames.insert(backup.name) }
            outcomes.append(outcome)
        }
        return outcomes
    }

    /// Why incremental `backup` cannot go to the target yet (its base is not there); nil when it can.
    private func missingBase(
        of backup: BackupListing, chains: BackupChains, existing: [BackupListing], failedNames: Set<String>
    ) -> String? {
        guard let baseDate = BackupName.baseDateText(of: backup.name) else { return nil }
        // A base that failed in this run may still have its name taken there, by another backup.
        if let failedBase = chains.bases(of: backup.name).first(where: failedNames.contains) {
            return "its base \"\(failedBase)\" could not be copied, so it was not copied either"
        }
        let present = BackupChains(existing + [backup]).bases(of: backup.name)
        if !present.isEmpty { return nil }
        let atSource = chains.bases(of: backup.name)
        if atSource.isEmpty {
            return
                "its base (the backup of \(baseDate)) is at neither \(source.displayName) nor \(target.displayName); an incremental backup without its base cannot be restored, so it was not copied"
        }
        return "its base \"\(atSource[0])\" could not be copied, so it was not copied either"
    }

    /// After an incremental arrives, its chain at the target stays locked as long as it is (S3 Object Lock).
    private func lockChain(of backup: BackupListing, _ outcome: BackupCopyOutcome) async -> BackupCopyOutcome {
        do {
            try await target.extendChainRetention(of: backup.name)
            return outcome
        } catch {
            return failed(backup, error)
        }
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
