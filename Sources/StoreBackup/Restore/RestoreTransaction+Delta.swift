import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension RestoreTransaction {
    /// What the unpacking step leaves for the swap.
    typealias Extracted = (databases: [String], files: Int, unverified: Bool, damaged: [String], verdicts: [String: DatabaseVerdict])

    /// With ``RestoreOptions/delta``, from a remote destination that serves byte ranges: the
    /// backup is opened in place (its directory and manifest fetched) and only the entries
    /// and database blocks that differ from the live store are fetched (``DeltaUnpacking``).
    /// Nil, having changed nothing, where that does not apply: no live store, a backup on
    /// this machine, a destination or server without ranges, a backup without a manifest, or
    /// an incremental one (restored from its chain, downloaded as before).
    func restoreDelta(_ backup: BackupListing, progress: ProgressHandler?) async throws -> RestoreResult? {
        guard options.delta, FileSystem.fileExists(layout.live), source.localPath(of: backup.name) == nil, backup.size > 0,
            let ranges = source.rangeReader(of: backup.name, size: backup.size)
        else { return nil }
        let cancel = CancellationFlag()
        let archive = RangedArchive(size: ranges.size, maxFetchBytes: BackupRangeReader.maxReadBytes) { range in
            try ranges.read(range, cancel: cancel)
        }
        let name = backup.name, passwords = self.passwords
        return try await withTaskCancellationHandler {
            let reader: ArchiveReader
            do {
                reader = try await runBlocking(name: "storebackup-restore") { _ in
                    try ArchiveReader(ranged: archive, backupName: name, passwords: passwords)
                }
            } catch {
                // A server that ignores ranges: the backup is downloaded, as without delta.
                if case .transfer(let transfer)? = archive.lastFailure, transfer.serviceCode == BackupRangeReader.rangesNotHonoured {
                    return nil
                }
                throw archive.lastFailure ?? error
            }
            guard let manifest = reader.manifest, !manifest.isIncremental else {
                reader.release()
                return nil
            }
            let chain = StagedChain(links: [ChainLink(name: name, path: name, downloaded: false, reader: reader)])
            let result = try await install(chain: chain, throttle: ProgressThrottle(progress))
            deltaOutcome.withLock { $0?.bytesDownloaded = archive.fetched.bytes }
            return reportingDelta(result)
        } onCancel: {
            cancel.cancel()
        }
    }

    /// Unpacks a full backup with ``DeltaUnpacking`` when ``RestoreOptions/delta`` asks for
    /// it and it can be used; nil otherwise (the caller unpacks the whole backup), with the
    /// reason kept for the result.
    func unpackDelta(_ reader: ArchiveReader, hadLiveStore: Bool, cancel: CancellationFlag, throttle: ProgressThrottle) throws
        -> Extracted?
    {
        guard options.delta else { return nil }
        let opened = hadLiveStore ? LiveStore.open(layout.live) : (nil, "there is no live store")
        guard reader.manifest != nil, let live = opened.store else {
            deltaOutcome.withLock { $0 = RestoreDelta(used: false, reason: opened.failure ?? "the backup has no manifest to compare with") }
            return nil
        }
        let unpacking = DeltaUnpacking(reader: reader, live: live, options: options.extraction, cancel: cancel, progress: throttle)
        let databases = try unpacking.unpack(into: layout.new)
        let counts = unpacking.statistics.current
        var delta = RestoreDelta(used: true)
        delta.bytesReused = counts.bytesReused
        delta.bytesRead = counts.bytesRead
        delta.filesReused = counts.filesReused
        delta.filesRead = counts.filesRead
        delta.blocksReused = counts.blocksReused
        delta.blocksRead = counts.blocksRead
        deltaOutcome.withLock { $0 = delta }
        return (
            databases, reader.entries.count, false, unpacking.damagedDatabases.current.keys.sorted(),
            unpacking.databaseVerdicts.current
        )
    }

    /// `result` with what ``RestoreOptions/delta`` did (nil when it was not asked for).
    func reportingDelta(_ result: RestoreResult) -> RestoreResult {
        guard options.delta else { return result }
        var result = result
        result.delta = deltaOutcome.current ?? RestoreDelta(used: false, reason: "the backup is incremental: restored from its chain")
        return result
    }
}
