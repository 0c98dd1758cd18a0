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
        let folder = chainFolder(for: destination.displayName)
        // The base must be at the destination: listed now, checked against the state under the lock.
        let listing = try? await destination.sortedBackups()
        let build = ChainBuild(folder: folder, policy: policy, password: password, listing: listing, now: now())
        defer { build.discard() }
        let archivePath =
            try destination.prepareInPlaceArchive()
            ?? ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "archive", suffix: ".zip")
        return try await withBuiltArchive(at: archivePath, password: password, progress: progress, chain: build) { archive in
            if let reason = build.fullReason {
                logger.info("a full backup: \(reason)", metadata: ["store": "\(storesDirectory)"])
            }
            var published = try await publish(archive, to: destination, progress: progress, baseName: build.baseName)
            published.fullReason = build.fullReason
            TestPausePoint.reach("chain-published")
            saveChainState(build, published: [published])
            archive.throttle.report(BackupProgress(phase: .done, bytesDone: archive.size, bytesTotal: archive.size), force: true)
            return published
        }
    }

    /// The chain state folder of this store for `destination` (its display name).
    func chainFolder(for destination: String) -> ChainFolder {
        ChainFolder(storesDirectory: storesDirectory, destination: destination)
    }

    /// Saves the chain state after a backup was published (at each destination it reached).
    /// A failure here does not undo the backup: the states are removed instead, so the next
    /// backup is a full one.
    func saveChainState(_ build: ChainBuild, published: [BackupResult]) {
        guard let manifest = published.first?.manifest else { return }
        let folders = published.map { (folder: chainFolder(for: $0.destination), name: $0.name, size: $0.size) }
        do {
            try build.commit(manifest: manifest, published: folders)
        } catch {
            for folder in folders { folder.folder.remove() }
            logger.warning(
                "could not save the chain state (\(error)); the next backup will be a full one",
                metadata: ["store": "\(storesDirectory)"])
        }
    }
}
