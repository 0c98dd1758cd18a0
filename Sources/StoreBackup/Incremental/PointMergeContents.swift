import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What the merged point's archive is made of, for ``ArchiveWriter``: an item for every
/// entry of the newest part's tree (with its mode, time and link target) and the chain
/// parts: files left in the base, merged page deltas and their maps, and the contents
/// stored whole, copied out of the part that holds them (and rebuilt with the page deltas
/// after it) into scratch files the items point at. Every scratch file is named by
/// ``ScratchFiles`` in `scratchDirectory` and removed by ``removeScratchFiles()``.
struct PointMergeContents {
    let chain: PointMergeParts
    let password: BackupPassword?
    let scratchDirectory: String
    let cancel: CancellationFlag

    private(set) var items: [StoreItem] = []
    private(set) var chainParts: ArchiveChainParts
    private var scratch: [String] = []
    private var hasher: PageHasher?

    init(chain: PointMergeParts, base: PointMergeBase, password: BackupPassword?, scratchDirectory: String, cancel: CancellationFlag) {
        self.chain = chain
        self.password = password
        self.scratchDirectory = scratchDirectory
        self.cancel = cancel
        chainParts = ArchiveChainParts(
            kind: "incremental",
            base: Manifest.Base(name: base.name, manifestSHA256: base.manifestSHA256, createdAt: base.manifest.createdAt),
            chainLength: (base.manifest.chainLength ?? 0) + 1, hashSalt: chain.newest.manifest.hashSalt, pageMaps: [])
    }

    /// The chain's page hashes: keyed in an encrypted chain (``PageHasher``).
    private var hashKind: PageHashKind { password == nil ? .sha256 : .hmacSHA256 }

    /// Makes the items and chain parts, in the newest part's order.
    mutating func prepare() throws {
        let newest = chain.newest
        let arena = StorePaths(root: EscapedName.escapedRoot(scratchDirectory))
        let databases = Dictionary(newest.manifest.databases.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        var completeMaps: [ArchiveChainParts.ExtraEntry] = []
        items.reserveCapacity(newest.manifest.files.count)
        for file in newest.manifest.files {
            try cancel.throwIfCancelled()
            guard let kind = StoreItem.Kind(rawValue: file.type) else {
                throw StoreBackupError.corruptArchive(name: newest.name, reason: "\(file.path) has the unknown type \"\(file.type)\"")
            }
            // Folders, links, FIFOs and what stays in the base: no content read from disk.
            func inArena() -> StoreItem {
                StoreItem(
                    in: arena, relativePath: file.path, kind: kind, permissions: file.mode, modificationTime: file.mtime,
                    size: file.size, linkTarget: file.linkTarget)
            }
            guard kind == .file || kind == .database else {
                items.append(inArena())
                continue
            }
            guard let content = chain.plan.contents[file.path], let sha256 = file.sha256 else {
                throw StoreBackupError.corruptArchive(name: newest.name, reason: "its manifest gives \(file.path) no content")
            }
            let database = databases[file.path]
            switch content.origin {
            case .base where content.deltas.isEmpty:
                chainParts.notStored[file.path] = .init(size: file.size, sha256: sha256, source: "base")
                if let database { try addEmptyMap(of: database) }
                items.append(inArena())
            case .base:
                guard let database else { throw notADatabase(file.path) }
                try addMergedDelta(of: file, database: database, deltas: content.deltas)
                chainParts.notStored[file.path] = .init(size: file.size, sha256: sha256, source: "pages")
                items.append(inArena())
            case .whole(let part, let row):
                let copy = try copyWhole(file, from: part, row: row, deltas: content.deltas, database: database)
                if let database {
                    let mapPath = newScratchPath("pagemap")
                    let size = try CompletePageMapBuilder.write(
                        of: copy, pageSize: database.pageSize, pages: database.pageCount, hasher: try chainHasher(), to: mapPath,
                        cancel: cancel)
                    completeMaps.append(.init(name: ChainBuild.pageMapPrefix + entryName(file.path), path: mapPath, size: size))
                    chainParts.pageMaps.append(.init(path: file.path, hash: hashKind.manifestName, complete: true))
                }
                items.append(
                    StoreItem(
                        relativePath: file.path, absolutePath: EscapedName.escapedRoot(copy), kind: kind,
                        looksIncompressible: database == nil ? nil : false, permissions: file.mode, modificationTime: file.mtime,
                        size: file.size, linkTarget: nil))
            }
        }
        // As create orders them: the complete maps after the deltas and their maps.
        chainParts.extraEntries += completeMaps
    }

    /// Removes every scratch file made.
    mutating func removeScratchFiles() {
        for path in scratch { unlink(path) }
        scratch = []
    }

    /// A database no part changed since the base: a map without records, as every
    /// database of a chain's backup has its map.
    private mutating func addEmptyMap(of database: Manifest.Database) throws {
        let mapPath = newScratchPath("pagemap")
        let map = try PageMapWriter(
            path: mapPath, kind: .changedOnly, hash: hashKind, pageSize: database.pageSize, pages: database.pageCount, durable: false)
        let size = try map.finish()
        chainParts.extraEntries.append(.init(name: ChainBuild.pageMapPrefix + entryName(database.path), path: mapPath, size: size))
        chainParts.pageMaps.append(.init(path: database.path, hash: hashKind.manifestName, complete: false))
    }

    /// A database the parts only patched with pages since the base: one delta and map for all.
    private mutating func addMergedDelta(
        of file: Manifest.File, database: Manifest.Database, deltas: [PointMergePlan.Delta]
    ) throws {
        guard Int64(database.pageCount) * Int64(database.pageSize) == file.size else { throw notADatabase(file.path) }
        let parts = try deltas.map { delta in
            let part = chain.parts[delta.part]
            let input = try deltaInput(of: file.path, delta, pageSize: database.pageSize)
            guard let map = part.ownEntries[mapEntryName(file.path)], let pages = part.databases[file.path]?.pageCount else {
                throw StoreBackupError.corruptArchive(name: part.name, reason: "the page map of \(file.path) is missing")
            }
            return MergedPageDelta.Part(delta: input, map: map, pages: pages)
        }
        let deltaPath = newScratchPath("pages")
        let mapPath = newScratchPath("pagemap")
        let written = try MergedPageDelta.write(
            databasePath: file.path, pageSize: database.pageSize, pages: database.pageCount, hashKind: hashKind, parts: parts,
            deltaPath: deltaPath, mapPath: mapPath, cancel: cancel)
        chainParts.extraEntries.append(
            .init(name: ChainBuild.pagesPrefix + entryName(file.path), path: deltaPath, size: written.deltaSize, patches: file.path))
        chainParts.extraEntries.append(.init(name: ChainBuild.pageMapPrefix + entryName(file.path), path: mapPath, size: written.mapSize))
        chainParts.pageMaps.append(.init(path: file.path, hash: hashKind.manifestName, complete: false))
    }

    /// Copies a file out of the part that stored it whole (where its manifest lists it as
    /// `row`) into a scratch file, then applies the page deltas of the parts after it in one
    /// pass; checked against the part's SHA-256, then (patched) the newest's. Returns the
    /// scratch file's path.
    private mutating func copyWhole(
        _ file: Manifest.File, from index: Int, row: Manifest.File, deltas: [PointMergePlan.Delta], database: Manifest.Database?
    ) throws -> String {
        let part = chain.parts[index]
        guard let entry = part.entries[file.path] else {
            throw StoreBackupError.corruptArchive(name: part.name, reason: "\(file.path) is not in the archive")
        }
        let copy = newScratchPath("merge")
        try ScratchEntryCopy.copy(entry, of: part.reader, expected: row, to: copy, cancel: cancel)
        guard !deltas.isEmpty else { return copy }
        guard let database, part.databases[file.path]?.pageSize == database.pageSize else { throw notADatabase(file.path) }
        let inputs = try deltas.map { try deltaInput(of: file.path, $0, pageSize: database.pageSize) }
        let merge = try PageDeltaMerge(
            databasePath: file.path, pageSize: database.pageSize, deltas: inputs, final: file, backupName: chain.newest.name)
        let descriptor = open(copy, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: copy, operation: "open", errno: errno) }
        defer { close(descriptor) }
        try merge.finish(descriptor: descriptor, path: copy)
        return copy
    }

    /// A part's page delta of a database whose page size is `pageSize` there too.
    private func deltaInput(of path: String, _ delta: PointMergePlan.Delta, pageSize: Int) throws -> PageDeltaMerge.Delta {
        let part = chain.parts[delta.part]
        guard let entry = part.reader.pageDeltas[path], part.databases[path]?.pageSize == pageSize else {
            throw StoreBackupError.corruptArchive(name: part.name, reason: "the page delta of \(path) is missing")
        }
        return PageDeltaMerge.Delta(reader: part.reader, entry: entry, size: delta.size)
    }

    /// The chain's page hasher, made once (a keyed one costs a key derivation).
    private mutating func chainHasher() throws -> PageHasher {
        if let hasher { return hasher }
        var made = PageHasher.plain
        if let password {
            guard let salt = chain.newest.manifest.hashSalt.flatMap(FileDigest.bytes(hex:)), salt.count == 16 else {
                throw StoreBackupError.corruptArchive(name: chain.newest.name, reason: "its manifest has no hash salt")
            }
            made = PageHasher.keyed(password: password, salt: salt)
        }
        hasher = made
        return made
    }

    private mutating func newScratchPath(_ purpose: String) -> String {
        let path = ScratchFiles.path(in: scratchDirectory, purpose: purpose)
        scratch.append(path)
        return path
    }

    private func entryName(_ path: String) -> [UInt8] { ArchiveChainParts.entryName(for: path) }

    /// A page map's entry name as the reader lists it (escaped).
    private func mapEntryName(_ path: String) -> String { EscapedName.escape(ChainBuild.pageMapPrefix + entryName(path)) }

    private func notADatabase(_ path: String) -> StoreBackupError {
        .corruptArchive(name: chain.newest.name, reason: "\(path) is patched by pages but is not a database of its size")
    }
}
