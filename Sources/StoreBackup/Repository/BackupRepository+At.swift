import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension BackupRepository {
    /// The newest backup made at or before `date`: chosen by the creation time its manifest
    /// records, never by its name (`restore --at`, docs/incremental-backups.md).
    ///
    /// Names only bound which manifests are read: a backup is named for its creation second
    /// or later (at most an hour ahead of it), so a backup
    /// named more than that after `date` cannot qualify, and once names fall below the best
    /// creation time found, none further can beat it. A local folder's manifests are read in
    /// place; a remote one's in ranges where the destination serves them. A backup whose
    /// manifest cannot be read (none, or no password for it) is passed over.
    ///
    /// - Throws: ``StoreBackupError/noBackups(destination:)`` when the destination holds none,
    ///   ``StoreBackupError/backupNotFound(name:destination:)`` when none was made by `date`.
    public func backup(at date: Date) async throws -> BackupListing {
        let listing = try await list()
        guard !listing.isEmpty else { throw StoreBackupError.noBackups(destination: destination.displayName) }
        let latestName = date.addingTimeInterval(BackupNameDate.maximumLead + 60)
        // Undated names first (nothing bounds them), then the dated by name, newest first.
        let ordered = listing.sorted { left, right in
            switch (BackupName.date(of: left.name), BackupName.date(of: right.name)) {
            case (nil, nil): return left.name < right.name
            case (nil, _): return true
            case (_, nil): return false
            case (let l?, let r?): return (l, left.name) > (r, right.name)
            }
        }
        var best: (backup: BackupListing, createdAt: Date)?
        for backup in ordered {
            if let named = BackupName.date(of: backup.name) {
                if named > latestName { continue }
                // Named for its creation second or later: it was made before `named + 1`.
                if let best, named.addingTimeInterval(1) <= best.createdAt { break }
            }
            guard let createdAt = await manifestCreatedAt(of: backup), createdAt <= date else { continue }
            if best == nil || createdAt > best!.createdAt { best = (backup, createdAt) }
        }
        guard let best else {
            throw StoreBackupError.backupNotFound(
                name: "made at or before \(UTCTimestamp.iso8601(date))", destination: destination.displayName)
        }
        return best.backup
    }

    /// The creation time a backup's manifest records; nil when it cannot be read.
    func manifestCreatedAt(of backup: BackupListing) async -> Date? {
        let name = backup.name, passwords = self.passwords
        let read: @Sendable (BrowsedArchive) async throws -> Date? = { archive in
            try await runBlocking(name: "storebackup-manifest") { cancel in
                try archive.reader(backupName: name, passwords: passwords, cancel: cancel).manifest?.createdAt
            }
        }
        do {
            if let local = destination.localPath(of: name) { return try await read(.file(local)) }
            if let found = try await RemoteArchive.withRangedReads(of: backup, in: destination, read) { return found }
            let target = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "manifest", suffix: ".zip")
            defer { unlink(target) }
            try await destination.download(name, to: target, progress: nil)
            return try await read(.file(target))
        } catch {
            logger.debug("cannot read the manifest of \(name): \(error)")
            return nil
        }
    }
}
