import Foundation

/// A page map of changed pages only (kind 1, docs/FORMAT.md format 3) read from an archive
/// entry record by record: the current record's page number and hash. The entry is hostile
/// input: its header must say kind 1, the chain's hash and the database's page size and
/// page count, its size must be whole records, and the records must ascend within the count.
final class ChangedPageMapReader {
    /// Page number and hash.
    static let recordSize = 4 + PageMapFormat.hashSize

    private let read: EntryChunks
    private let backupName: String
    private let databasePath: String
    let pages: Int
    private let records: Int
    private var recordsRead = 0
    /// The current record's page, nil once every record was read.
    private(set) var number: Int?
    /// The current record's hash (``PageMapFormat/hashSize`` bytes).
    let hash: UnsafeMutableRawBufferPointer
    private let record: UnsafeMutableRawBufferPointer

    /// Opens `entry` of `reader` and checks its header against the database's `pageSize`
    /// and `pages` in that backup and the chain's hash kind.
    init(
        reader: ArchiveReader, entry: ArchiveEntry, databasePath: String, pageSize: Int, pages: Int, hashKind: PageHashKind
    ) throws {
        backupName = reader.backupName
        self.databasePath = databasePath
        self.pages = pages
        let body = entry.size - Int64(PageMapFormat.headerSize)
        records = body >= 0 && body % Int64(Self.recordSize) == 0 ? Int(body / Int64(Self.recordSize)) : -1
        read = try EntryChunks(reader: reader, entry: entry)
        hash = UnsafeMutableRawBufferPointer.allocate(byteCount: PageMapFormat.hashSize, alignment: 16)
        record = UnsafeMutableRawBufferPointer.allocate(byteCount: max(Self.recordSize, PageMapFormat.headerSize), alignment: 16)
        // Every property is set from here on: a throw below deallocates through deinit.
        guard records >= 0 else { throw damaged("its size is not whole records") }
        let header = try read.exactly(PageMapFormat.headerSize, into: record)
        guard Array(header[0..<4]) == PageMapFormat.magic, header[4] == PageMapFormat.version,
            header[5] == PageMapFormat.Kind.changedOnly.rawValue
        else { throw damaged("it is not a map of changed pages") }
        guard header[6] == hashKind.rawValue else { throw damaged("its hashes are not the chain's") }
        guard Int(PageDeltaReader.uint32(header, at: 8)) == pageSize, Int(PageDeltaReader.uint32(header, at: 12)) == pages else {
            throw damaged("its page size or page count is not the database's")
        }
        guard records <= pages else { throw damaged("it holds more records than pages") }
        try next()
    }

    deinit {
        hash.deallocate()
        record.deallocate()
    }

    /// Reads the next record (or, after the last, checks that nothing follows).
    func next() throws {
        guard recordsRead < records else {
            number = nil
            guard try read.isAtEnd() else { throw damaged("it holds more than its records") }
            return
        }
        let bytes = try read.exactly(Self.recordSize, into: record)
        let found = Int(PageDeltaReader.uint32(bytes, at: 0))
        guard found > (number ?? 0), found <= pages else { throw damaged("its page \(found) is out of order or beyond its pages") }
        hash.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[4..<Self.recordSize]))
        number = found
        recordsRead += 1
    }

    private func damaged(_ reason: String) -> StoreBackupError {
        .corruptArchive(name: backupName, reason: "the page map of \(databasePath) is unusable: \(reason)")
    }
}
