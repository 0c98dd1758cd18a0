import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Opens a database of a backup for ``BackupDatabase``: finds the backup, opens its archive
/// where it is (a local file in place, a remote one read in ranges, or downloaded when its
/// destination serves no ranges), follows an incremental's chain down to the backup that
/// stores the database whole (each link checked as a restore checks it), indexes the chain's
/// page deltas by their page maps (or reads those without block hashes whole), and indexes
/// the whole entry's blocks.
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
            let (final, pageSize, chainLength) = try Self.database(path, in: newest)
            // The deltas' blocks share one cache, sized by the chain's length (at most).
            let spill = BlockSpill()
            let cache = ChainPages.deltaCache(bytes: cacheBytes, deltas: min(max(0, chainLength), StagedChain.maxLength), spill: spill)
            let scratch = ChainScratch()
            let known = newest.reader.password.map { PasswordProvider.fixed($0) } ?? passwords
            // Newest first: the backups whose page deltas change the database, down to the one that stores it whole.
            var deltas: [ChainDelta] = []
            var lineage = PageLineage(backups: [], writtenPages: [:])
            var current = newest
            var row = final
            while row.source != nil {
                lineage.backups.append(current.name)
                guard opened.count < StagedChain.maxLength, let baseName = current.reader.manifest?.base?.name else {
                    throw StoreBackupError.brokenChain(name: current.name, reason: "its manifest names no base")
                }
                guard let listing = listings.first(where: { $0.name == baseName }) else {
                    throw StoreBackupError.brokenChain(
                        name: current.name, reason: "its base \"\(baseName)\" is missing from \(destination.displayName)")
                }
                let base = try await openArchive(listing, password: known)
                opened.append(base)
                try StagedChain.check(
                    ChainLink(name: current.name, path: current.name, downloaded: false, reader: current.reader),
                    on: ChainLink(name: base.name, path: base.name, downloaded: false, reader: base.reader))
                guard let baseRow = base.reader.manifest?.files.first(where: { $0.path == path }) else {
                    throw StoreBackupError.brokenChain(name: current.name, reason: "its base \"\(baseName)\" has no \(path)")
                }
                if row.source == "pages" {
                    guard let entry = current.reader.pageDeltas[path] else {
                        throw StoreBackupError.corruptArchive(name: current.name, reason: "it has no page delta of \(path)")
                    }
                    let link = current, size = row.size
                    deltas.append(
                        try await runBlocking(name: "storebackup-open-db") { _ in
                            try Self.delta(entry, of: link, size: size, pageSize: pageSize, path: path, cache: cache, scratch: scratch)
                        })
                    lineage.writtenPages[current.name] = deltas.last?.pages
                } else if row.source == "base" {
                    lineage.writtenPages[current.name] = []
                }
                // Checked and indexed: its manifest, listing and the chunks that held them can go.
                Self.letGo(current)
                current = base
                row = baseRow
            }
            let whole = current
            let baseRow = row
            lineage.backups.append(whole.name)
            let found = lineage
            let shared = sharing.flatMap { $0.databasePath == path && $0.baseBackup == whole.name ? $0.baseBlocks : nil }
            let changes = deltas
            let spans = opened.map(\.span)
            let file = try await runBlocking(name: "storebackup-open-db") { _ in
                let base = try shared ?? Self.blockReader(of: whole, row: baseRow, path: path, cacheBytes: cacheBytes)
                var chain: ChainPages?
                if let pageSize, !changes.isEmpty {
                    guard final.size % Int64(pageSize) == 0 else {
                        throw StoreBackupError.corruptArchive(
                            name: backup.name, reason: "its manifest gives \(path) a size that is not whole pages of \(pageSize) bytes")
                    }
                    chain = ChainPages(
                        deltas: changes.reversed(), scratch: scratch, spill: spill, pageSize: pageSize,
                        pages: Int(final.size / Int64(pageSize)), databasePath: path)
                }
                return try BackupPageFile(size: final.size, base: base, chain: chain, lineage: found, spans: spans)
            }
            // Only blocks are read from now on, exactly, through the spans: the last reader can go
            // too (the others went as the chain was followed).
            Self.letGo(whole)
            return try BackupDatabase(
                backupName: backup.name, databasePath: path, file: file, downloads: opened.compactMap(\.download))
        } catch {
            for link in opened { if let download = link.download { unlink(download) } }
            throw error
        }
    }

    /// Lets go of what reading `link`'s archive needed but reading blocks does not: the reader
    /// (its listing and manifest) and the chunks of a remote archive kept for it.
    private static func letGo(_ link: Opened) {
        link.reader.release()
        if case .ranged(let archive) = link.span { archive.dropRecentChunks() }
    }

    /// The newest backup's row of the database, its page size and the chain's length: taken
    /// out of its manifest, which is let go with the reader once its link is checked.
    private static func database(_ path: String, in newest: Opened) throws -> (row: Manifest.File, pageSize: Int?, chainLength: Int) {
        guard let manifest = newest.reader.manifest else { throw StoreBackupError.unverifiableBackup(name: newest.name) }
        guard let final = manifest.files.first(where: { $0.path == path }), StagedChain.isRegular(final.type) else {
            throw StoreBackupError.notInBackup(name: newest.name, paths: [path])
        }
        return (final, manifest.databases.first { $0.path == path }?.pageSize, manifest.chainLength ?? 0)
    }

    /// One page delta of the chain (`entry` of `link`'s archive; `size`: the database's size
    /// in that backup): indexed by its page map where its manifest gives its block hashes
    /// (its blocks then kept in `cache`), else read whole into `scratch`.
    private static func delta(
        _ entry: ArchiveEntry, of link: Opened, size: Int64, pageSize: Int?, path: String, cache: InflatedBlockCache,
        scratch: ChainScratch
    ) throws -> ChainDelta {
        guard let pageSize, pageSize > 0 else {
            throw StoreBackupError.corruptArchive(name: link.name, reason: "its manifest gives \(path) no page size")
        }
        if let indexed = try ChainDeltaIndexing.open(
            entry, of: link.reader, span: link.span, databasePath: path, size: size, pageSize: pageSize, cache: cache)
        {
            return indexed
        }
        return try scratch.appendWhole(entry, of: link.reader, size: size, pageSize: pageSize, databasePath: path)
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
