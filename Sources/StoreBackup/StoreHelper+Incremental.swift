import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension StoreHelper {
    /// ``createBackup(progress:)`` with ``incremental`` set: a format-3 full or incremental
    /// backup by `policy` (docs/incremental-backups.md). The chain state beside the store is
    /// saved only once the backup is published; any doubt about it makes a full backup.
    func createChainedBackup(policy: IncrementalPolicy, progress: ProgressHandler?) async throws -> BackupResult {
        let progress = ProgressPlan.stamping(ProgressPlan.create, progress)
        let password = try archivePassword()
        try requireStoresDirectory()
        try await destination.preflight()
        let folder = ChainFolder(storesDirectory: storesDirectory, destination: destination.displayName)
        // The base must be at the destination: listed now, checked against the state under the lock.
        let listing = try? await destination.sortedBackups()
        let build = ChainBuild(folder: folder, policy: policy, password: password, listing: listing)
        defer { build.discard() }
        let archivePath =
            try destination.prepareInPlaceArchive()
            ?? ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "archive", suffix: ".zip")
        return try await withBuiltArchive(at: archivePath, password: password, progress: progress, chain: build) { archive in
            if let reason = build.fullReason {
                logger.info("a full backup: \(reason)", metadata: ["store": "\(storesDirectory)"])
            }
            let published = try await publish(archive, to: destination, progress: progress, baseName: build.baseName)
            saveChainState(build, for: published)
            archive.throttle.report(BackupProgress(phase: .done, bytesDone: archive.size, bytesTotal: archive.size), force: true)
            return published
        }
    }

    /// Saves the chain state after a published backup. A failure here does not undo the
    /// backup: the state is removed instead, so the next backup is a full one.
    func saveChainState(_ build: ChainBuild, for published: BackupResult) {
        do {
            try build.commit(name: published.name, manifest: published.manifest, archiveSize: published.size)
        } catch {
            build.folder.remove()
            logger.warning(
                "could not save the chain state (\(error)); the next backup will be a full one",
                metadata: ["store": "\(storesDirectory)"])
        }
    }
}
