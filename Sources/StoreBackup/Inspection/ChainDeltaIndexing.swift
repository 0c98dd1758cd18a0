import Foundation

/// Indexes a page delta by its backup's page map instead of reading it: the map of changed
/// pages (kind 1) lists exactly the pages of the delta, ascending, so record `i` of the
/// delta writes the map's `i`-th page. Nothing of the delta is read until a page is: then the
/// block holding its record, checked against its hash (``ChainDelta``).
enum ChainDeltaIndexing {
    /// The delta `entry` of `reader`'s archive (read through `span`) indexed, its blocks kept
    /// in `cache`; nil when its manifest gives the delta no block hashes (an archive written
    /// before them, or a delta stored without deflating): it is read whole instead.
    /// `size`: the database's size in that backup.
    static func open(
        _ entry: ArchiveEntry, of reader: ArchiveReader, span: ArchiveSpanReader, databasePath: String, size: Int64,
        pageSize: Int, cache: InflatedBlockCache
    ) throws -> ChainDelta? {
        let name = reader.backupName
        guard let manifest = reader.manifest, let row = manifest.pageDeltas?.first(where: { $0.path == databasePath }) else {
            return nil
        }
        func damaged(_ reason: String) -> StoreBackupError {
            .corruptArchive(name: name, reason: "the page delta of \(databasePath) is unusable: \(reason)")
        }
        guard row.size == entry.size else { throw damaged("the manifest says \(row.size) bytes, the archive holds \(entry.size)") }
        let body = entry.size - Int64(PageDeltaReader.headerSize)
        guard body >= 0, body % Int64(4 + pageSize) == 0, size % Int64(pageSize) == 0 else {
            throw damaged("its \(entry.size) bytes are not whole records of \(pageSize)-byte pages")
        }
        let records = Int(body / Int64(4 + pageSize))
        let deltaRow = row.row(entryPath: entry.path)
        guard let index = EntryBlockIndex.make(entry: entry, row: deltaRow),
            index.blocks.count <= 1 || deltaRow.deflateBlockHashes?.count == index.blocks.count,
            let hashName = manifest.pageMaps?.first(where: { $0.path == databasePath && !$0.complete })?.hash,
            let hashKind = [PageHashKind.sha256, .hmacSHA256].first(where: { $0.manifestName == hashName }),
            let mapEntry = reader.ownEntries.first(where: { $0.path == mapEntryName(databasePath) })
        else { return nil }
        let map = try ChangedPageMapReader(
            reader: reader, entry: mapEntry, databasePath: databasePath, pageSize: pageSize, pages: Int(size / Int64(pageSize)),
            hashKind: hashKind)
        var pages: [UInt32] = []
        pages.reserveCapacity(records)
        while let number = map.number {
            guard pages.count < records else { throw mismatch(name, databasePath, records: records, listed: pages.count + 1) }
            pages.append(UInt32(number))
            try map.next()
        }
        guard pages.count == records else { throw mismatch(name, databasePath, records: records, listed: pages.count) }
        guard
            let blocks = try EntryBlockReader.open(
                reader: reader, span: span, entry: entry, row: deltaRow, cacheBytes: 0, cache: cache,
                describedAs: "the page delta of \(databasePath)", hashesRequired: true)
        else { return nil }
        return ChainDelta(backupName: name, pages: pages, records: .blocks(blocks))
    }

    /// The page map's entry name as the reader lists it (escaped).
    private static func mapEntryName(_ databasePath: String) -> String {
        EscapedName.escape(
            Array(ArchiveNames.pageMapPrefix.utf8) + ArchiveNames.entryName(for: databasePath).dropLast().map { UInt8(bitPattern: $0) })
    }

    private static func mismatch(_ name: String, _ databasePath: String, records: Int, listed: Int) -> StoreBackupError {
        .corruptArchive(
            name: name,
            reason: "the page map of \(databasePath) does not list the pages of its page delta (\(listed) pages for \(records) records)")
    }
}
