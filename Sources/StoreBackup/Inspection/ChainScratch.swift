import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// An unlinked scratch file in `TMPDIR` holding the pages of the page deltas of a chain
/// that are read whole when opened (those without block hashes: archives written before
/// the manifest listed them), one page per record, appended delta after delta. Made at the
/// first page, and unlinked at once, so nothing is left behind, whatever ends the process.
// Unchecked: `descriptor` and `end` change only while the chain is opened, one delta at a
// time; reads (pread) come after.
final class ChainScratch: @unchecked Sendable {
    private var descriptor: Int32 = -1
    private let folder = ScratchFiles.temporaryDirectory
    /// The bytes written so far.
    private(set) var end: Int64 = 0

    deinit { if descriptor >= 0 { close(descriptor) } }

    func append(_ bytes: UnsafeRawBufferPointer) throws {
        if descriptor < 0 {
            let path = ScratchFiles.path(in: folder, purpose: "pages")
            descriptor = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
            unlink(path)
        }
        try FileSystem.write(descriptor, bytes, at: end, path: folder)
        end += Int64(bytes.count)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        let got = try PositionedRead.fill(descriptor, into: buffer, at: offset, path: "(scratch pages)")
        guard got == buffer.count else { throw StoreBackupError.io(path: "(scratch pages)", operation: "read", errno: EIO) }
    }

    /// Reads the page delta `entry` of `reader` whole, as a stream to its end (libzip then
    /// checks its CRC-32, and an encrypted one's HMAC), with every check of
    /// ``PageDeltaReader`` against the database's `size` in that backup, appending its pages.
    func appendWhole(
        _ entry: ArchiveEntry, of reader: ArchiveReader, size: Int64, pageSize: Int, databasePath: String
    ) throws -> ChainDelta {
        let start = end
        var numbers: [UInt32] = []
        let checker = PageDeltaReader(backupName: reader.backupName, databasePath: databasePath)
        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: max(pageSize, PageDeltaReader.headerSize), alignment: 16)
        defer { page.deallocate() }
        try reader.checkLocalHeader(index: entry.index)
        try reader.withEntryStream(entry) { read in
            var consumed: Int64 = 0
            func readExactly(_ count: Int) throws {
                guard Int64(count) <= entry.size - consumed else { throw checker.damaged("it is shorter than its records") }
                var filled = 0
                while filled < count {
                    let got = try read(UnsafeMutableRawBufferPointer(rebasing: page[filled..<count]))
                    guard got > 0 else { throw checker.damaged("it ends before its declared size") }
                    filled += got
                }
                consumed += Int64(count)
            }
            try readExactly(PageDeltaReader.headerSize)
            let header = try checker.checkHeader(
                UnsafeRawBufferPointer(rebasing: page[0..<PageDeltaReader.headerSize]), entrySize: entry.size,
                pageSize: pageSize, finalSize: size)
            numbers.reserveCapacity(header.records)
            var previous = 0
            for _ in 0..<header.records {
                try readExactly(4)
                let number = Int(PageDeltaReader.uint32(UnsafeRawBufferPointer(page), at: 0))
                try checker.checkRecord(number, after: previous, in: header)
                previous = number
                numbers.append(UInt32(number))
                try readExactly(pageSize)
                try append(UnsafeRawBufferPointer(rebasing: page[0..<pageSize]))
            }
            // Read to its end: libzip checks the CRC-32 (and an encrypted entry's HMAC) there.
            guard try read(UnsafeMutableRawBufferPointer(rebasing: page[0..<1])) == 0 else {
                throw checker.trailingBytes(entrySize: entry.size)
            }
        }
        return ChainDelta(backupName: reader.backupName, pages: numbers, records: .scratch(start: start))
    }
}
