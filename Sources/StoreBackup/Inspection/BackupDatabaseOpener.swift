import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Opens a database of a backup for ``BackupDatabase``: finds the backup, opens its archive
/// where it is (a local file in place, a remote one read in ranges, or downloaded when its
/// destination serves no ranges), follows an incremental's chain down to the backup that
/// stores the database whole (each link checked as a restore checks it), reads the chain's
/// page deltas, and indexes the whole entry's blocks.
struct BackupDatabaseOpener: Sendable {
    let destination: any BackupDestination
    let passwords: PasswordProvider?
    /// Inflated blocks kept per database.
    var cacheBytes = 8 << 20

    /// One opened archive of the chain.
    private struct Opened: @unchecked Sendable {  // the reader is used by one thread at a time
        let name: String
        let reader: ArchiveReader
        let span: ArchiveSpanReader
        let download: String?
    }

    /// `sharing`: a database of the same chain whose whole entry's blocks (and their
    /// cache) this one reads too, when both take their pages from the same backup.
    func open(_ nameOrLatest: String, path: String, sharing: BackupDatabase? = nil) async throws -> BackupDatabase {
        let backup = try await destination.resolve(nameOrLatest)
        let listings = try await destination.sortedBackups()
        var opened: [Opened] = []
        do {
            let newest = try await openArchive(backup, password: passwords)
            opened.append(newest)
            guard let manifest = newest.reader.manifest else { throw StoreBackupError.unverifiableBackup(name: backup.name) }
            guard let final = manifest.files.first(where: { $0.path == path }), StagedChain.isRegular(final.type) else {
                throw StoreBackupError.notInBackup(name: backup.name, paths: [path])
            }
            // Newest first: the backups whose page deltas change the database, down to the one that stores it whole.
            var deltas: [(reader: ArchiveReader, entry: ArchiveEntry, size: Int64)] = []
            var deltaNames: [String] = []
            var lineage = PageLineage(backups: [], writtenPages: [:])
            var current = newest
            var row = final
            while row.source != nil {
                lineage.backups.append(current.name)
                if row.source == "pages" {
                    guard let entry = current.reader.pageDeltas[path] else {
                        throw StoreBackupError.corruptArchive(name: current.name, reason: "it has no page delta of \(path)")
                    }
                    deltas.append((current.reader, entry, row.size))
                    deltaNames.append(current.name)
                } else if row.source == "base" {
                    lineage.writtenPages[current.name] = []
                }
                guard opened.count < StagedChain.maxLength, let baseName = current.reader.manifest?.base?.name else {
                    throw StoreBackupError.brokenChain(name: current.name, reason: "its manifest names no base")
                }
                guard let listing = listings.first(where: { $0.name == baseName }) else {
                    throw StoreBackupError.brokenChain(
                        name: current.name, reason: "its base \"\(baseName)\" is missing from \(destination.displayName)")
                }
                let known = newest.reader.password.map { PasswordProvider.fixed($0) } ?? passwords
                let base = try await openArchive(listing, password: known)
                opened.append(base)
                try StagedChain.check(
                    ChainLink(name: current.name, path: current.name, downloaded: false, reader: current.reader),
                    on: ChainLink(name: base.name, path: base.name, downloaded: false, reader: base.reader))
                guard let baseRow = base.reader.manifest?.files.first(where: { $0.path == path }) else {
                    throw StoreBackupError.brokenChain(name: current.name, reason: "its base \"\(baseName)\" has no \(path)")
                }
                current = base
                row = baseRow
            }
            let whole = current
            let baseRow = row
            lineage.backups.append(whole.name)
            let found = lineage, names = deltaNames
            let shared = sharing.flatMap { $0.databasePath == path && $0.baseBackup == whole.name ? $0.baseBlocks : nil }
            let pageSize = manifest.databases.first { $0.path == path }?.pageSize
            let changes = deltas
            let file = try await runBlocking(name: "storebackup-open-db") { _ in
                let base = try shared ?? Self.blockReader(of: whole, row: baseRow, path: path, cacheBytes: cacheBytes)
                var chain: ChainPages?
                if !changes.isEmpty {
                    guard let pageSize else {
                        throw StoreBackupError.corruptArchive(name: backup.name, reason: "its manifest gives \(path) no page size")
                    }
                    chain = try ChainPages(deltas: changes.reversed(), pageSize: pageSize, backupName: backup.name, databasePath: path)
                }
                var known = found
                for (name, pages) in zip(names.reversed(), chain?.writtenPages ?? []) { known.writtenPages[name] = pages }
                return try BackupPageFile(size: final.size, base: base, chain: chain, lineage: known)
            }
            // Only the base's bytes are read from now on: the other handles can go.
            for link in opened { link.reader.release() }
            return try BackupDatabase(
                backupName: backup.name, databasePath: path, file: file, downloads: opened.compactMap(\.download))
        } catch {
            for link in opened { if let download = link.download { unlink(download) } }
            throw error
        }
    }

    /// The reader of the entry that stores the database whole, its block hashes ready.
    private static func blockReader(of archive: Opened, row: Manifest.File, path: String, cacheBytes: Int) throws -> EntryBlockReader {
        guard let entry = archive.reader.entries.first(where: { $0.path == path && $0.kind == .file }) else {
            throw StoreBackupError.corruptArchive(name: archive.name, reason: "it has no entry for \(path)")
        }
        // Never nil: the hashes are not required.
        return try EntryBlockReader.open(reader: archive.reader, span: archive.span, entry: entry, row: row, cacheBytes: cacheBytes)!
    }

    /// Opens one backup's archive: in place, in ranges, or downloaded into `TMPDIR`.
    private func openArchive(_ backup: BackupListing, password: PasswordProvider?) async throws -> Opened {
        let name = backup.name
        if let local = destination.localPath(of: name) {
            return try await runBlocking(name: "storebackup-open-db") { _ in
                let reader = try ArchiveReader(path: local, backupName: name, passwords: password)
                guard let file = reader.localFile ?? LocalArchiveFile(path: local) else {
                    throw StoreBackupError.io(path: local, operation: "open", errno: errno)
                }
                return Opened(name: name, reader: reader, span: .local(file), download: nil)
            }
        }
        if backup.size > 0, let ranges = destination.rangeReader(of: name, size: backup.size) {
            let cancel = CancellationFlag()
            let archive = RangedArchive(size: ranges.size, maxFetchBytes: BackupRangeReader.maxReadBytes) { range in
                try ranges.read(range, cancel: cancel)
            }
            do {
                return try await runBlocking(name: "storebackup-open-db") { _ in
                    let reader = try ArchiveReader(ranged: archive, backupName: name, passwords: password)
                    return Opened(name: name, reader: reader, span: .ranged(archive), download: nil)
                }
            } catch {
                // A server that ignores ranges: download instead, as ls and extract do.
                guard case .transfer(let transfer)? = archive.lastFailure, transfer.serviceCode == BackupRangeReader.rangesNotHonoured
                else {
                    throw archive.lastFailure ?? error
                }
            }
        }
        let download = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "download", suffix: ".zip")
        do {
            try await destination.download(name, to: download, progress: nil)
            return try await runBlocking(name: "storebackup-open-db") { _ in
                let reader = try ArchiveReader(path: download, backupName: name, passwords: password)
                guard let file = reader.localFile ?? LocalArchiveFile(path: download) else {
                    throw StoreBackupError.io(path: download, operation: "open", errno: errno)
                }
                return Opened(name: name, reader: reader, span: .local(file), download: download)
            }
        } catch {
            unlink(download)
            throw error
        }
    }
}
