import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Applies a page delta (`.storebackup/pages/<entry name>`, docs/FORMAT.md, format 3) to a
/// database as its base left it, reading the entry as a stream: one page in memory at a time.
///
/// The entry is hostile input like any other: its magic, version and page size are checked
/// against what the manifest says before a byte is written, the record count against the
/// entry's size, each page number against the page count (ascending, 1-based), and the
/// entry may not hold a byte more than its records.
struct PageDeltaReader {
    /// "SBPD".
    static let magic: [UInt8] = Array("SBPD".utf8)
    static let version: UInt8 = 1
    /// Magic, version, 3 reserved bytes, then page size, page count and record count.
    static let headerSize = 20

    /// What a delta's header says.
    struct Header: Equatable {
        let pageSize: Int
        /// The database's page count after applying.
        let pages: Int
        /// How many records follow the header.
        let records: Int
    }

    /// The backup and database named in messages.
    let backupName: String
    let databasePath: String

    /// Reads the delta through `read` (fills the buffer it is given as far as it can and
    /// returns the count, 0 at the end), checks it against `entrySize` (the size the
    /// archive's directory declares), `pageSize` and `finalSize` (the manifest's), and
    /// writes its pages into `descriptor` with `pwrite`, then cuts the file to its page count.
    @discardableResult
    func apply(
        entrySize: Int64, pageSize: Int, finalSize: Int64, to descriptor: Int32, path: String,
        read: (UnsafeMutableRawBufferPointer) throws -> Int
    ) throws -> Header {
        var consumed: Int64 = 0
        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: max(pageSize, Self.headerSize), alignment: 16)
        defer { page.deallocate() }
        func readExactly(_ count: Int) throws {
            guard Int64(count) <= entrySize - consumed else { throw damaged("it is shorter than its records") }
            var filled = 0
            while filled < count {
                let got = try read(UnsafeMutableRawBufferPointer(rebasing: page[filled..<count]))
                guard got > 0 else { throw damaged("it ends before its declared \(entrySize) bytes") }
                filled += got
            }
            consumed += Int64(count)
        }

        try readExactly(Self.headerSize)
        let header = try checkHeader(
            UnsafeRawBufferPointer(rebasing: page[0..<Self.headerSize]), entrySize: entrySize, pageSize: pageSize, finalSize: finalSize)
        var previous = 0
        for _ in 0..<header.records {
            try readExactly(4)
            let number = Int(Self.uint32(UnsafeRawBufferPointer(page), at: 0))
            try checkRecord(number, after: previous, in: header)
            previous = number
            try readExactly(pageSize)
            try FileSystem.write(
                descriptor, UnsafeRawBufferPointer(rebasing: page[0..<pageSize]), at: Int64(number - 1) * Int64(pageSize), path: path)
        }
        // Nothing may follow the last record (libzip stops at the declared size; a stream
        // that goes on is damage).
        let extra = try read(UnsafeMutableRawBufferPointer(rebasing: page[0..<1]))
        guard extra == 0 else { throw trailingBytes(entrySize: entrySize) }
        guard ftruncate(descriptor, off_t(finalSize)) == 0 else {
            throw StoreBackupError.io(path: path, operation: "set the size of", errno: errno)
        }
        return header
    }

    func damaged(_ reason: String) -> StoreBackupError {
        .corruptArchive(name: backupName, reason: "the page delta of \(databasePath) is unusable: \(reason)")
    }

    /// Checks a delta's first ``headerSize`` bytes against the entry's declared size and the
    /// manifest's page size and file size.
    func checkHeader(_ bytes: UnsafeRawBufferPointer, entrySize: Int64, pageSize: Int, finalSize: Int64) throws -> Header {
        guard Array(bytes[0..<4]) == Self.magic else { throw damaged("it does not start with SBPD") }
        guard bytes[4] == Self.version else { throw damaged("its version is \(bytes[4]), not \(Self.version)") }
        let header = Header(
            pageSize: Int(Self.uint32(bytes, at: 8)), pages: Int(Self.uint32(bytes, at: 12)), records: Int(Self.uint32(bytes, at: 16)))
        guard header.pageSize == pageSize else {
            throw damaged("its page size is \(header.pageSize), the database's is \(pageSize)")
        }
        guard Int64(header.pages) * Int64(pageSize) == finalSize else {
            throw damaged("it makes \(header.pages) pages of \(pageSize) bytes, not the manifest's \(finalSize) bytes")
        }
        guard header.records <= header.pages,
            entrySize == Int64(Self.headerSize) + Int64(header.records) * Int64(4 + pageSize)
        else {
            throw damaged("its \(header.records) records do not fill its \(entrySize) bytes")
        }
        return header
    }

    /// Checks a record's page number: after the one before it (`previous`, 0 for the first)
    /// and within the delta's page count.
    func checkRecord(_ number: Int, after previous: Int, in header: Header) throws {
        guard number > previous else { throw damaged("page \(number) follows page \(previous) (records must ascend)") }
        guard number <= header.pages else { throw damaged("page \(number) is beyond its \(header.pages) pages") }
    }

    /// The damage found after the last record: the entry goes on past its declared size.
    func trailingBytes(entrySize: Int64) -> StoreBackupError {
        damaged("it holds more than its declared \(entrySize) bytes")
    }

    static func uint32(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
    }
}
