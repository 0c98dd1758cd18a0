import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Rebuilds a database of a chain in one pass while a chain step unpacks it from the backup
/// that last stored it whole: each page is taken from the newest page delta of the backups
/// since that holds it (a merge of their ascending records), or else left as unpacked; the
/// file is cut or extended to the newest page count. The final content is hashed as it
/// becomes final and checked against the newest manifest's SHA-256 (or, with
/// `hashesContent` off, read back by the ``EntryWriter`` beside the check); `integrity_check`
/// (``UnpackingDatabase``) reads only bytes already final.
///
/// Each delta is read as a stream, one page of each in memory, with every check of
/// ``PageDeltaReader``: magic, version, page size, page count against that backup's
/// manifest, records ascending within its page count, exact entry size.
final class PageDeltaMerge: DatabasePatch, @unchecked Sendable {  // used by the one thread that unpacks it
    /// One backup's page delta of the database, and what that backup's manifest says of it.
    struct Delta {
        let reader: ArchiveReader
        let entry: ArchiveEntry
        /// The database's size in that backup's manifest.
        let size: Int64
    }

    let databasePath: String
    let pageSize: Int
    let finalSize: Int64
    let finalPermissions: UInt32
    let finalModificationTime: Int64
    let finalSHA256: String
    var hashesContent = true
    /// The chain's newest backup, named in a mismatch.
    private let backupName: String
    /// Oldest first: on a page several hold, the last one's record wins.
    private var streams: [DeltaStream]
    private var hasher = SHA256()
    private var hashed: Int64 = 0
    /// Written in full and its SHA-256 matched.
    private(set) var isFinished = false
    private let readBack = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    /// The page ``nextPage(endingBy:)`` returns.
    private let current: UnsafeMutableRawBufferPointer

    /// Opens every delta (`deltas` oldest first) and checks its header. `final` is the
    /// database as the newest manifest lists it.
    init(databasePath: String, pageSize: Int, deltas: [Delta], final: Manifest.File, backupName: String) throws {
        guard let sha256 = final.sha256 else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "its manifest gives \(databasePath) no SHA-256")
        }
        self.databasePath = databasePath
        self.pageSize = pageSize
        self.backupName = backupName
        finalSize = final.size
        finalPermissions = final.mode
        finalModificationTime = final.mtime
        finalSHA256 = sha256
        current = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
        streams = try deltas.map { try DeltaStream($0, databasePath: databasePath, pageSize: pageSize) }
    }

    deinit {
        readBack.deallocate()
        current.deallocate()
    }

    func advance(descriptor: Int32, path: String, written: Int64) throws -> Int64 {
        try writePages(descriptor: descriptor, path: path, through: written)
        // A page partly written may still be overwritten by a record.
        let final = min(written / Int64(pageSize) * Int64(pageSize), finalSize)
        if hashesContent { try hash(descriptor: descriptor, path: path, upTo: final) }
        return final
    }

    func finish(descriptor: Int32, path: String) throws {
        guard ftruncate(descriptor, off_t(finalSize)) == 0 else {
            throw StoreBackupError.io(path: path, operation: "set the size of", errno: errno)
        }
        try writePages(descriptor: descriptor, path: path, through: .max)
        if hashesContent {
            try hash(descriptor: descriptor, path: path, upTo: finalSize)
            guard FileDigest.hex(hasher.finalize()) == finalSHA256 else {
                throw StoreBackupError.checksumMismatch(name: backupName, entry: databasePath)
            }
        }
        isFinished = true
    }

    func patch(block: UnsafeMutableRawBufferPointer, at offset: Int64, descriptor: Int32, path: String) throws {
        let end = offset + Int64(block.count)
        while let (number, page) = try nextPage(endingBy: end) {
            let start = Int64(number - 1) * Int64(pageSize)
            try FileSystem.write(descriptor, UnsafeRawBufferPointer(page), at: start, path: path)
            // A page that began in the block before (a block size that is no multiple of the
            // page size) has only its tail in this block's memory.
            let head = Int(max(0, offset - start))
            (block.baseAddress! + Int(start + Int64(head) - offset)).copyMemory(from: page.baseAddress! + head, byteCount: pageSize - head)
        }
        // The pages that end in the block are final now: hashed here rather than read back,
        // when they follow what was hashed (advance reads back anything this leaves).
        guard hashesContent, offset == hashed else { return }
        let final = min(end / Int64(pageSize) * Int64(pageSize), finalSize)
        guard final > offset else { return }
        hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: block[0..<Int(final - offset)]))
        hashed = final
    }

    /// Writes, in page order, each page that ends by `limit` from the newest delta holding it.
    private func writePages(descriptor: Int32, path: String, through limit: Int64) throws {
        while let (number, page) = try nextPage(endingBy: limit) {
            try FileSystem.write(descriptor, UnsafeRawBufferPointer(page), at: Int64(number - 1) * Int64(pageSize), path: path)
        }
    }

    /// The next page of the final file that ends by `limit`, from the newest delta holding it
    /// (valid until the next call), or nil. Pages a later delta cut away are skipped.
    private func nextPage(endingBy limit: Int64) throws -> (Int, UnsafeMutableRawBufferPointer)? {
        while true {
            var lowest: Int?
            var newest = 0
            for (index, stream) in streams.enumerated() {
                guard let number = stream.number, number <= (lowest ?? .max) else { continue }
                lowest = number
                newest = index
            }
            guard let number = lowest, Int64(number) * Int64(pageSize) <= limit else { return nil }
            // The newest delta's page is copied out before the streams move on.
            UnsafeMutableRawBufferPointer(rebasing: current[0..<pageSize]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: streams[newest].page[0..<pageSize]))
            for stream in streams where stream.number == number { try stream.next() }
            // A page a later delta cut away is not part of the final file.
            if Int64(number) * Int64(pageSize) <= finalSize {
                return (number, UnsafeMutableRawBufferPointer(rebasing: current[0..<pageSize]))
            }
        }
    }

    /// Feeds the hash with the file's bytes up to `end`, read back (they were just written).
    private func hash(descriptor: Int32, path: String, upTo end: Int64) throws {
        while hashed < end {
            let wanted = Int(min(Int64(readBack.count), end - hashed))
            let got = try PositionedRead.some(
                descriptor, into: UnsafeMutableRawBufferPointer(rebasing: readBack[0..<wanted]), at: hashed, path: path)
            guard got > 0 else { throw StoreBackupError.checksumMismatch(name: backupName, entry: databasePath) }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: readBack[0..<got]))
            hashed += Int64(got)
        }
    }
}

/// One page delta read record by record: the current record's page number and bytes.
/// (``PointMerge`` merges deltas with it too.)
final class DeltaStream {
    private let bytes: EntryChunks
    private let checker: PageDeltaReader
    private var header = PageDeltaReader.Header(pageSize: 0, pages: 0, records: 0)
    private let entrySize: Int64
    private var recordsRead = 0
    /// The current record's page, nil once every record was read.
    private(set) var number: Int?
    let page: UnsafeMutableRawBufferPointer

    init(_ delta: PageDeltaMerge.Delta, databasePath: String, pageSize: Int) throws {
        let checker = PageDeltaReader(backupName: delta.reader.backupName, databasePath: databasePath)
        let entrySize = delta.entry.size
        self.checker = checker
        self.entrySize = entrySize
        bytes = try EntryChunks(
            reader: delta.reader, entry: delta.entry, pastDeclared: { checker.damaged("it is shorter than its records") },
            endsEarly: { checker.damaged("it ends before its declared \(entrySize) bytes") })
        // Every property is set from here on: a throw below deallocates through deinit.
        page = UnsafeMutableRawBufferPointer.allocate(byteCount: max(pageSize, PageDeltaReader.headerSize), alignment: 16)
        let head = try bytes.exactly(PageDeltaReader.headerSize, into: page)
        header = try checker.checkHeader(head, entrySize: entrySize, pageSize: pageSize, finalSize: delta.size)
        try next()
    }

    deinit { page.deallocate() }

    /// Reads the next record (or, after the last, checks that nothing follows).
    func next() throws {
        guard recordsRead < header.records else {
            number = nil
            guard try bytes.isAtEnd() else { throw checker.trailingBytes(entrySize: entrySize) }
            return
        }
        let found = Int(PageDeltaReader.uint32(try bytes.exactly(4, into: page), at: 0))
        try checker.checkRecord(found, after: number ?? 0, in: header)
        _ = try bytes.exactly(header.pageSize, into: page)
        number = found
        recordsRead += 1
    }
}
