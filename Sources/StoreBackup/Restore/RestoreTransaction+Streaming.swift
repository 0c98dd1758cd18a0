import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension RestoreTransaction {
    /// Restores `backup` from a remote destination that serves byte ranges while it
    /// downloads: parallel ranged requests fill the staging file (``StreamingDownload``,
    /// same place and scratch name as a plain download), and the unpacking reads it
    /// through ``ArrivingArchive``, each read waiting for its bytes, so the restore takes
    /// about as long as the longer of the two instead of their sum. Before anything is
    /// swapped in, the download must be complete and the whole file pass libzip's
    /// consistency check; every other check (sizes, checksums, manifest, databases) is the
    /// one a downloaded backup gets, on the same bytes.
    ///
    /// Returns nil, having changed nothing, where the backup is not restored this way: a
    /// local backup, a destination without ranged reads, streaming turned off, or a server
    /// that turns out not to answer ranges (the caller then downloads the backup as before;
    /// what was unpacked is discarded). An incremental backup is downloaded whole first
    /// and restored with its chain as before.
    func restoreWhileDownloading(_ backup: BackupListing, progress: ProgressHandler?) async throws -> RestoreResult? {
        guard StreamingDownload.isEnabled, source.localPath(of: backup.name) == nil, backup.size > 0,
            let ranges = source.rangeReader(of: backup.name, size: backup.size)
        else { return nil }
        let target = layout.downloadPath()
        let download: StreamingDownload
        do { download = try StreamingDownload(ranges: ranges, to: target, progress: progress) } catch {
            unlink(target)
            throw error
        }
        defer {
            download.stop()
            unlink(target)
        }
        let name = backup.name, passwords = self.passwords
        do {
            return try await withTaskCancellationHandler {
                let reader = try await runBlocking(name: "storebackup-restore") { _ in
                    try ArchiveReader(
                        arriving: ArrivingArchive(path: target, arrival: download.arrival), backupName: name, passwords: passwords)
                }
                if reader.manifest?.isIncremental == true {
                    try await runBlocking(name: "storebackup-download") { cancel in try download.finish(cancel: cancel) }
                    let chain = try await fetchChain(newest: name, staged: (target, true), progress: progress)
                    defer { chain.removeDownloads() }
                    return try await install(chain: chain, throttle: ProgressThrottle(progress))
                }
                let chain = StagedChain(links: [ChainLink(name: name, path: target, downloaded: true, reader: reader)])
                return try await install(chain: chain, throttle: ProgressThrottle(progress)) { cancel in
                    try download.finish(cancel: cancel)
                    try ArchiveReader.checkConsistency(path: target, backupName: name)
                }
            } onCancel: {
                download.cancelNow()
            }
        } catch {
            // A read that failed because the download did says so better than libzip can.
            guard let failure = download.arrival.failed else { throw error }
            if case StoreBackupError.transfer(let transfer) = failure, transfer.serviceCode == BackupRangeReader.rangesNotHonoured {
                return nil
            }
            throw failure
        }
    }
}
