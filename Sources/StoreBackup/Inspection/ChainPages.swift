import Foundation

/// The pages that the page deltas of a chain (docs/FORMAT.md, format 3) write over the
/// backup that stores the database whole, each served from the newest delta that writes it.
///
/// What is read when the database is opened is each delta's index, its page map (format 4
/// deltas with block hashes: ``ChainDeltaIndexing``), or, for a delta without block hashes,
/// the delta itself, whole, into a scratch file (``ChainScratch``). Memory holds the page
/// numbers: each delta's (record `i` writes `pages[i]`, for ``PageLineage`` too) and, for the
/// pages any delta writes, which delta wrote them last.
// Unchecked: set up in init, then only read (the block readers and the scratch file lock or pread).
final class ChainPages: @unchecked Sendable {
    let pageSize: Int
    /// The page count after the newest delta.
    let pages: Int
    /// Oldest first.
    let deltas: [ChainDelta]
    private let scratch: ChainScratch
    /// Where the deltas' blocks go when dropped from memory (siblings' too).
    private let spill: BlockSpill?
    /// Every page (1-based, at most `pages`) some delta writes, ascending, and beside it the
    /// newest delta that writes it (an index into `deltas`).
    private let written: [UInt32]
    private let newest: [UInt16]
    let databasePath: String

    /// `deltas` oldest first; `pages`: the database's page count in the newest backup.
    /// `spill`: where the cache of the deltas' blocks spills.
    init(deltas: [ChainDelta], scratch: ChainScratch, spill: BlockSpill?, pageSize: Int, pages: Int, databasePath: String) {
        self.deltas = deltas
        self.scratch = scratch
        self.spill = spill
        self.pageSize = pageSize
        self.pages = pages
        self.databasePath = databasePath
        // Two passes of one merge of the deltas' ascending lists: the count, then the pages,
        // so that the arrays are made at their size, with nothing else as large beside them.
        var unique = 0
        Self.merge(deltas, upTo: UInt32(clamping: pages)) { _, _ in unique += 1 }
        var written: [UInt32] = []
        var newest: [UInt16] = []
        written.reserveCapacity(unique)
        newest.reserveCapacity(unique)
        Self.merge(deltas, upTo: UInt32(clamping: pages)) { page, delta in
            written.append(page)
            newest.append(UInt16(delta))
        }
        self.written = written
        self.newest = newest
    }

    /// Calls `body` for each page (at most `last`: a page beyond the newest count was cut off
    /// by a later backup) that some delta writes, ascending, with the newest delta that writes
    /// it: a merge of the deltas' ascending lists through a heap of one cursor per delta.
    private static func merge(_ deltas: [ChainDelta], upTo last: UInt32, _ body: (UInt32, Int) -> Void) {
        // (page, delta, position): the heap's top is the lowest page, of the newest delta.
        var heap: [(page: UInt32, delta: Int, position: Int)] = []
        func before(_ a: (page: UInt32, delta: Int, position: Int), _ b: (page: UInt32, delta: Int, position: Int)) -> Bool {
            a.page != b.page ? a.page < b.page : a.delta > b.delta
        }
        func siftDown(_ start: Int) {
            var index = start
            while true {
                let left = 2 * index + 1, right = left + 1
                var top = index
                if left < heap.count, before(heap[left], heap[top]) { top = left }
                if right < heap.count, before(heap[right], heap[top]) { top = right }
                guard top != index else { return }
                heap.swapAt(index, top)
                index = top
            }
        }
        for (number, delta) in deltas.enumerated() where !delta.pages.isEmpty {
            heap.append((delta.pages[0], number, 0))
        }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
        var previous: UInt32 = 0
        while let top = heap.first, top.page <= last {
            if top.page != previous { body(top.page, top.delta) }
            previous = top.page
            let pages = deltas[top.delta].pages
            if top.position + 1 < pages.count {
                heap[0] = (pages[top.position + 1], top.delta, top.position + 1)
            } else {
                heap[0] = heap[heap.count - 1]
                heap.removeLast()
            }
            siftDown(0)
        }
    }

    private init(sharing other: ChainPages, deltas: [ChainDelta]) {
        pageSize = other.pageSize
        pages = other.pages
        self.deltas = deltas
        scratch = other.scratch
        spill = other.spill
        written = other.written
        newest = other.newest
        databasePath = other.databasePath
    }

    /// The same pages read through block readers of their own, which keep their inflated
    /// blocks in one cache (``deltaCache(bytes:deltas:spill:)``) and spill them where this one's
    /// do (`spilling`; a reader that reads in page order needs no block twice): one per
    /// thread.
    func sibling(cacheBytes: Int, spilling: Bool = true) -> ChainPages {
        let cache = Self.deltaCache(bytes: cacheBytes, deltas: deltas.count, spill: spilling ? spill : nil)
        return ChainPages(sharing: self, deltas: deltas.map { $0.sibling(cache: cache) })
    }

    /// The cache the blocks of `deltas` page deltas share: `bytes` of blocks, and at least one
    /// block per delta and one more (a scan in page order reads each delta's records in order,
    /// so one block of each delta stays useful), the blocks it drops going to `spill`: a scan
    /// in rowid order jumps between the deltas' blocks, and reads each back instead of
    /// inflating it again.
    static func deltaCache(bytes: Int, deltas: Int, spill: BlockSpill?) -> InflatedBlockCache {
        InflatedBlockCache(bytes: bytes, blockSize: CompressionPipeline.blockSize, minimum: deltas + 1, spill: spill)
    }

    /// Copies page `number`'s bytes (from `start` within it) into `buffer`; false when no
    /// delta writes the page.
    func copy(page number: Int, from start: Int, into buffer: UnsafeMutableRawBufferPointer) throws -> Bool {
        guard number > 0, number <= pages, let slot = Self.search(written, for: UInt32(number)) else { return false }
        let delta = deltas[Int(newest[slot])]
        guard let record = Self.search(delta.pages, for: UInt32(number)) else { return false }
        try delta.copy(
            record: record, page: UInt32(number), from: start, into: buffer, pageSize: pageSize, scratch: scratch,
            databasePath: databasePath)
        return true
    }

    /// Blocks of the deltas read so far and their compressed bytes.
    var statistics: (blocks: Int, compressedBytes: Int64) {
        var blocks = 0
        var bytes: Int64 = 0
        for delta in deltas {
            guard case .blocks(let reader) = delta.records else { continue }
            let read = reader.statistics
            blocks += read.blocks
            bytes += read.compressedBytes
        }
        return (blocks, bytes)
    }

    /// Where `value` is in the ascending `values`.
    private static func search(_ values: [UInt32], for value: UInt32) -> Int? {
        var low = 0
        var high = values.count
        while low < high {
            let middle = (low + high) / 2
            if values[middle] < value { low = middle + 1 } else { high = middle }
        }
        return low < values.count && values[low] == value ? low : nil
    }
}
