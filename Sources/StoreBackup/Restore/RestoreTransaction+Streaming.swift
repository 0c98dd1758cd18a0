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
    /// what was unpacked is discarded). An incremental backup is downloaded whole first, and
    /// so are the incrementals of its chain; the chain's full, most of its bytes, is then
    /// unpacked while it downloads, as a full backup is, and its download completed and
    /// checked before the swap.
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
        // The chain's full, when the backup is incremental: streamed too.
        let full = Locked<(name: String, download: StreamingDownload)?>(nil)
        defer { full.withLock { $0?.download.stop() } }
        do {
            return try await withTaskCancellationHandler {
                let reader = try await runBlocking(name: "storebackup-restore") { _ in
                    try ArchiveReader(
                        arriving: ArrivingArchive(path: target, arrival: download.arrival), backupName: name, passwords: passwords)
                }
                if reader.manifest?.isIncremental == true {
                    try await runBlocking(name: "storebackup-download") { cancel in
                        try download.finish(cancel: cancel)
                        try ArchiveReader.checkConsistency(path: target, backupName: name)
                    }
                    // Opened already: a password is asked for once.
                    let chain = try await fetchChain(
                        newest: name, staged: (target, true), opened: reader, progress: progress,
                        streamFull: { listing in try self.streamFull(listing, into: full, progress: progress) })
                    defer { chain.removeDownloads() }
                    guard let streamed = full.withLock({ $0 }) else {
                        return try await install(chain: chain, throttle: ProgressThrottle(progress))
                    }
                    let fullPath = streamed.download.path
                    return try await install(chain: chain, throttle: ProgressThrottle(progress)) { cancel in
                        try streamed.download.finish(cancel: cancel)
                        try ArchiveReader.checkConsistency(path: fullPath, backupName: streamed.name)
                    }
                }
                let chain = StagedChain(links: [ChainLink(name: name, path: target, downloaded: true, reader: reader)])
                return try await install(chain: chain, throttle: ProgressThrottle(progress)) { cancel in
                    try download.finish(cancel: cancel)
                    try ArchiveReader.checkConsistency(path: target, backupName: name)
                }
            } onCancel: {
                download.cancelNow()
                full.withLock { $0?.download.cancelNow() }
            }
        } catch {
            // A read that failed because a download did says so better than libzip can.
            guard let failure = download.arrival.failed ?? full.withLock({ $0?.download.arrival.failed }) else { throw error }
            if case StoreBackupError.transfer(let transfer) = failure, transfer.serviceCode == BackupRangeReader.rangesNotHonoured {
                return nil
            }
            throw failure
        }
    }

    /// Starts the streamed download of a chain's full into a staging file, kept in `box`
    /// for the caller to finish and stop, and says how to open it while it arrives; nil
    /// where the source serves no ranges.
    private func streamFull(
        _ listing: BackupListing, into box: Locked<(name: String, download: StreamingDownload)?>, progress: ProgressHandler?
    ) throws -> ArrivingBase? {
        guard listing.size > 0, let ranges = source.rangeReader(of: listing.name, size: listing.size) else { return nil }
        let target = layout.downloadPath()
        let download: StreamingDownload
        do { download = try StreamingDownload(ranges: ranges, to: target, progress: progress) } catch {
            unlink(target)
            throw error
        }
        box.withLock { $0 = (listing.name, download) }
        let name = listing.name, arrival = download.arrival
        return ArrivingBase(path: target) { passwords in
            try ArchiveReader(arriving: ArrivingArchive(path: target, arrival: arrival), backupName: name, passwords: passwords)
        }
    }
}
