import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The pages that the page deltas of a chain (docs/FORMAT.md, format 3) change, newest of
/// each page kept: read once when the database is opened, each delta as a stream to its
/// end (libzip then checks its CRC-32, and an encrypted one's HMAC) with every check of
/// ``PageDeltaReader``. The pages go into an unlinked scratch file in `TMPDIR` (changed
/// pages only, never the database), so memory holds only their index.
// Unchecked: set up in init, then only read (pread shares the descriptor).
final class ChainPages: @unchecked Sendable {
    let pageSize: Int
    /// The page count after the newest delta.
    let pages: Int
    /// The page numbers each delta writes, in the order of `deltas`.
    let writtenPages: [[Int32]]
    private let descriptor: Int32
    /// Page number (1-based) → where its bytes are in the scratch file.
    private let slots: [Int32: Int64]

    /// `deltas` oldest first, each with the database's size in that backup's manifest.
    init(deltas: [(reader: ArchiveReader, entry: ArchiveEntry, size: Int64)], pageSize: Int, backupName: String, databasePath: String)
        throws
    {
        self.pageSize = pageSize
        let folder = ScratchFiles.temporaryDirectory
        let path = ScratchFiles.path(in: folder, purpose: "pages")
        let descriptor = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        // Unlinked at once: nothing is left behind, whatever ends the process.
        unlink(path)
        var slots: [Int32: Int64] = [:]
        var end: Int64 = 0
        var pages = 0
        var written: [[Int32]] = []
        do {
            for delta in deltas {
                var numbers: [Int32] = []
                let checker = PageDeltaReader(backupName: backupName, databasePath: databasePath)
                let page = UnsafeMutableRawBufferPointer.allocate(byteCount: max(pageSize, PageDeltaReader.headerSize), alignment: 16)
                defer { page.deallocate() }
                try delta.reader.checkLocalHeader(index: delta.entry.index)
                try delta.reader.withEntryStream(delta.entry) { read in
                    var consumed: Int64 = 0
                    func readExactly(_ count: Int) throws {
                        guard Int64(count) <= delta.entry.size - consumed else { throw checker.damaged("it is shorter than its records") }
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
                        UnsafeRawBufferPointer(rebasing: page[0..<PageDeltaReader.headerSize]), entrySize: delta.entry.size,
                        pageSize: pageSize, finalSize: delta.size)
                    var previous = 0
                    for _ in 0..<header.records {
                        try readExactly(4)
                        let number = Int(PageDeltaReader.uint32(UnsafeRawBufferPointer(page), at: 0))
                        try checker.checkRecord(number, after: previous, in: header)
                        previous = number
                        numbers.append(Int32(number))
                        try readExactly(pageSize)
                        let slot = slots[Int32(number)] ?? end
                        try FileSystem.write(descriptor, UnsafeRawBufferPointer(rebasing: page[0..<pageSize]), at: slot, path: folder)
                        if slot == end { end += Int64(pageSize) }
                        slots[Int32(number)] = slot
                    }
                    // Read to its end: libzip checks the CRC-32 (and an encrypted entry's HMAC) there.
                    guard try read(UnsafeMutableRawBufferPointer(rebasing: page[0..<1])) == 0 else {
                        throw checker.trailingBytes(entrySize: delta.entry.size)
                    }
                    pages = header.pages
                }
                written.append(numbers)
            }
        } catch {
            close(descriptor)
            throw error
        }
        self.descriptor = descriptor
        // A page beyond the newest count was cut off by a later backup.
        self.slots = slots.filter { Int($0.key) <= pages }
        self.pages = pages
        writtenPages = written
    }

    deinit { close(descriptor) }

    /// Copies page `number`'s bytes (from `start` within it) into `buffer`; false when no
    /// delta holds the page.
    func copy(page number: Int, from start: Int, into buffer: UnsafeMutableRawBufferPointer) throws -> Bool {
        guard let slot = slots[Int32(number)] else { return false }
        let got = try PositionedRead.fill(descriptor, into: buffer, at: slot + Int64(start), path: "(scratch pages)")
        guard got == buffer.count else { throw StoreBackupError.io(path: "(scratch pages)", operation: "read", errno: EIO) }
        return true
    }
}
