import Foundation

/// An archive entry's inflated bytes in exact counts, read through a 64 KiB buffer (one
/// call through libzip's layers per chunk, not per record), never past the declared size.
final class EntryChunks {
    private let readEntry: (UnsafeMutableRawBufferPointer) throws -> Int
    private let entry: ArchiveEntry
    private let backupName: String
    private let chunk: UnsafeMutableRawBufferPointer
    private var start = 0
    private var end = 0
    private var consumed: Int64 = 0

    /// What to throw when more is asked than the entry declares, and when it ends before
    /// its declared size (nil: a corrupt-archive error naming the entry).
    private let pastDeclared: (() -> StoreBackupError)?
    private let endsEarly: (() -> StoreBackupError)?

    init(
        reader: ArchiveReader, entry: ArchiveEntry, pastDeclared: (() -> StoreBackupError)? = nil,
        endsEarly: (() -> StoreBackupError)? = nil
    ) throws {
        self.entry = entry
        backupName = reader.backupName
        self.pastDeclared = pastDeclared
        self.endsEarly = endsEarly
        readEntry = try Self.stream(entry, of: reader)
        chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
    }

    /// A function that fills a buffer with the entry's next inflated (and decrypted) bytes
    /// as far as it can, 0 at the end; it holds the stream, which checks the CRC-32 (and an
    /// encrypted entry's authentication code) at the end.
    static func stream(_ entry: ArchiveEntry, of reader: ArchiveReader) throws -> (UnsafeMutableRawBufferPointer) throws -> Int {
        // ISA-L inflates several times faster than libzip's zlib.
        if InflatingEntryStream.canRead(entry) { return try InflatingEntryStream(reader: reader, entry: entry).read }
        return try reader.openEntryStream(entry).read
    }

    deinit { chunk.deallocate() }

    /// The next `count` bytes, copied to the start of `buffer` (at least `count` bytes).
    func exactly(_ count: Int, into buffer: UnsafeMutableRawBufferPointer) throws -> UnsafeRawBufferPointer {
        guard Int64(count) <= entry.size - consumed else { throw pastDeclared?() ?? shorter() }
        var filled = 0
        while filled < count {
            if start == end {
                let wanted = Int(min(Int64(chunk.count), entry.size - consumed - Int64(filled)))
                let got = try readEntry(UnsafeMutableRawBufferPointer(rebasing: chunk[0..<wanted]))
                guard got > 0 else { throw endsEarly?() ?? shorter() }
                start = 0
                end = got
            }
            let taken = min(count - filled, end - start)
            (buffer.baseAddress! + filled).copyMemory(from: chunk.baseAddress! + start, byteCount: taken)
            start += taken
            filled += taken
        }
        consumed += Int64(count)
        return UnsafeRawBufferPointer(rebasing: buffer[0..<count])
    }

    /// Whether the entry ends here (the stream's own end checks, CRC and authentication, run).
    func isAtEnd() throws -> Bool {
        guard start == end else { return false }
        var byte: UInt8 = 0
        return try withUnsafeMutableBytes(of: &byte) { try readEntry($0) } == 0
    }

    private func shorter() -> StoreBackupError {
        .corruptArchive(name: backupName, reason: "\(entry.path) ends before its declared \(entry.size) bytes")
    }
}
