import Foundation

/// Copies a diff's backup databases into scratch files, each block read, checked and
/// inflated once, in order, on every core: the diff then reads plain files instead of
/// inflating a 1 MiB block for each page its rowid-ordered scans jump to. The older
/// database is copied whole (``ScratchDatabaseCopy``); of the newer one only the pages that
/// differ from the older's are written, laid over the older's copy (``ScratchOverlayCopy``),
/// and those pages are what ``ChangedRowids`` narrows the comparison to.
enum ScratchCopies {
    /// What a copy made.
    struct Made: Sendable {
        let older: ScratchDatabaseCopy
        let newer: ScratchOverlayCopy?
        /// The pages (1-based) whose bytes differ between the two, or that only the newer
        /// has; nil with one database, or when the two have different page sizes.
        let changedPages: Set<Int>?
        /// Chunks of the newer not read at all: their blocks' hashes are the older's.
        var sameBlocks = 0

        /// Deletes the files.
        func remove() {
            older.remove()
        }
    }

    /// Why `TMPDIR` has no room for copies of `bytes` (with the reserve restore keeps
    /// free on a file system); nil when it has.
    static func lackOfSpace(for bytes: Int64) -> String? {
        let folder = ScratchFiles.temporaryDirectory
        guard let (free, total) = try? FreeSpace.volume(of: folder) else { return "\(folder) is not a folder it can examine" }
        let reserve = FreeSpace.reserve(total: total)
        guard bytes > free - reserve else { return nil }
        return
            "copying the databases needs up to \(FreeSpace.describe(bytes)) in \(folder), which has \(FreeSpace.describe(free)) free "
            + "and \(FreeSpace.describe(reserve)) must stay free"
    }

    /// Copies `older` (and the pages of `newer` that differ from it) into new scratch
    /// files; they are deleted again when this throws.
    static func make(older: BackupDatabase, newer: BackupDatabase?, cancel: CancellationFlag) throws -> Made {
        try make(older: older, newer: newer, changed: nil, cancel: cancel)
    }

    /// Two points of one chain: `older` copied whole, and of `newer` only the pages in
    /// `changed` (those the page deltas between them write,
    /// ``BackupDatabase/pagesChanged(since:)``) read, from those deltas, and laid over it
    /// where their bytes differ. No block of the chain's full is read for the newer side.
    static func make(older: BackupDatabase, newer: BackupDatabase, changed: Set<Int>, cancel: CancellationFlag) throws -> Made {
        try make(older: older, newer: newer, changed: Optional(changed), cancel: cancel)
    }

    private static func make(older: BackupDatabase, newer: BackupDatabase?, changed: Set<Int>?, cancel: CancellationFlag) throws -> Made {
        ScratchFiles.sweep(ScratchFiles.temporaryDirectory)
        let olderCopy = try ScratchDatabaseCopy(size: older.size)
        do {
            let pageSize = try newer.flatMap { try commonPageSize(older, $0) }
            let newerCopy = try newer.map { try ScratchOverlayCopy(size: $0.size, unit: pageSize ?? chunkBytes, base: olderCopy) }
            var reading: PageSet?
            if let pageSize, let newer, let changed {
                reading = pagesToRead(changed, olderPages: Int(older.size / Int64(pageSize)), newerPages: Int(newer.size / Int64(pageSize)))
            }
            let sameBlocks = try copy(older: older, into: olderCopy, newer: newer.map { ($0, newerCopy!, reading) }, cancel: cancel)
            let changed = pageSize == nil ? nil : newerCopy.map { Set($0.overlaidUnits.map { $0 + 1 }) }
            return Made(older: olderCopy, newer: newerCopy, changedPages: changed, sameBlocks: sameBlocks)
        } catch {
            olderCopy.remove()
            throw error
        }
    }

    /// The newer point's pages to read: the changed ones it holds, and any beyond the
    /// older's end (a delta writes those, but the overlay must have them whatever it says).
    private static func pagesToRead(_ changed: Set<Int>, olderPages: Int, newerPages: Int) -> PageSet {
        var pages = PageSet(pageCount: newerPages)
        for page in changed where page >= 1 && page <= newerPages { pages.insert(page) }
        for page in min(olderPages, newerPages) + 1..<newerPages + 1 { pages.insert(page) }
        return pages
    }

    /// Bytes copied at a time per thread: the entries' own block size, so that each
    /// thread inflates each block it reads once.
    private static let chunkBytes = CompressionPipeline.blockSize

    /// Chunks a thread takes at a time: consecutive, so that the blocks of a point's page
    /// deltas (each spanning many chunks) are inflated by one thread, not by every one.
    private static let chunksPerTake = 32

    /// Copies `older` whole into `olderCopy` and lays the newer database's pages over it
    /// where they differ: every page compared, or (`pages`) only those read. A chunk whose
    /// block has the same SHA-256 in both entries is not read on the newer side; returns
    /// how many were not.
    private static func copy(
        older: BackupDatabase, into olderCopy: ScratchDatabaseCopy,
        newer: (database: BackupDatabase, copy: ScratchOverlayCopy, pages: PageSet?)?, cancel: CancellationFlag
    ) throws -> Int {
        let sameBlocks = Locked(0)
        let largest = max(older.size, newer?.database.size ?? 0)
        let chunkCount = Int((largest + Int64(chunkBytes) - 1) / Int64(chunkBytes))
        let takes = stride(from: 0, to: chunkCount, by: chunksPerTake).map { $0..<min($0 + chunksPerTake, chunkCount) }
        let width = min(WorkerPool.cores, 4)
        try WorkerPool.forEach(takes, name: "storebackup-diff-copy", width: width, cancel: cancel) {
            // A thread's readers keep only the block they are copying (the minimum cache).
            let readOlder = older.threadReader(cacheBytes: 0)
            let readNewer = newer?.database.threadReader(cacheBytes: 0)
            let buffers = ChunkBuffers(count: chunkBytes, both: newer != nil)
            return { take in
                for chunk in take {
                    try cancel.throwIfCancelled()
                    let start = Int64(chunk) * Int64(chunkBytes)
                    let olderCount = Int(max(0, min(Int64(chunkBytes), older.size - start)))
                    if olderCount > 0 {
                        let piece = UnsafeMutableRawBufferPointer(rebasing: buffers.older[0..<olderCount])
                        try readOlder(piece, start)
                        try olderCopy.write(UnsafeRawBufferPointer(piece), at: start)
                    }
                    guard let newer, let readNewer else { continue }
                    let newerCount = Int(max(0, min(Int64(chunkBytes), newer.database.size - start)))
                    guard newerCount > 0 else { continue }
                    if newer.pages == nil, newerCount == olderCount, let hash = older.blockHash(chunk, blockSize: chunkBytes),
                        hash == newer.database.blockHash(chunk, blockSize: chunkBytes)
                    {
                        sameBlocks.withLock { $0 += 1 }
                        continue
                    }
                    if newer.pages == nil { try readNewer(UnsafeMutableRawBufferPointer(rebasing: buffers.newer[0..<newerCount]), start) }
                    let unit = newer.copy.unit
                    let first = Int(start / Int64(unit))
                    for offset in stride(from: 0, to: newerCount, by: unit) {
                        let count = min(unit, newerCount - offset)
                        let piece = UnsafeMutableRawBufferPointer(rebasing: buffers.newer[offset..<offset + count])
                        if let pages = newer.pages {
                            // Units are pages here.
                            guard pages.contains(first + offset / unit + 1) else { continue }
                            try readNewer(piece, start + Int64(offset))
                        }
                        guard !buffers.same(at: offset, count: count, olderCount: olderCount) else { continue }
                        try newer.copy.overlay(unit: first + offset / unit, UnsafeRawBufferPointer(piece))
                    }
                }
            }
        }
        return sameBlocks.current
    }

    /// The page size both databases' headers give; nil when they differ or are not valid.
    private static func commonPageSize(_ older: BackupDatabase, _ newer: BackupDatabase) throws -> Int? {
        guard older.size >= 100, newer.size >= 100 else { return nil }
        let sizes = try [older, newer].map { database in
            let header = try database.bytes(at: 0, count: 100)
            let declared = Int(header[16]) << 8 | Int(header[17])
            return declared == 1 ? 65536 : declared
        }
        guard sizes[0] == sizes[1], sizes[0] >= 512, sizes[0].nonzeroBitCount == 1, chunkBytes % sizes[0] == 0 else { return nil }
        return sizes[0]
    }

    /// One thread's chunk of each side.
    private final class ChunkBuffers {
        let older: UnsafeMutableRawBufferPointer
        let newer: UnsafeMutableRawBufferPointer

        init(count: Int, both: Bool) {
            older = .allocate(byteCount: count, alignment: 16)
            newer = .allocate(byteCount: both ? count : 0, alignment: 16)
        }

        deinit {
            older.deallocate()
            newer.deallocate()
        }

        /// Whether the newer chunk's `count` bytes at `offset` are the older's (of which
        /// there are `olderCount`).
        func same(at offset: Int, count: Int, olderCount: Int) -> Bool {
            offset + count <= olderCount && memcmp(older.baseAddress! + offset, newer.baseAddress! + offset, count) == 0
        }
    }
}
