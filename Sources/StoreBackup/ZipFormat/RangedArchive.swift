import CZip
import Foundation

/// A remote archive read through ranged reads, for `ls` and `extract` of a backup that is
/// not on this machine: libzip reads it through a source of its own (``openHandle(backupName:)``)
/// and only the bytes it asks for are fetched.
///
/// Two kinds of bytes are kept. The end of the archive (the end records) and the central
/// directory, which libzip reads again for every handle, are fetched in one go and kept for
/// the archive's life (``willRead(_:)``; their size is checked against the archive limits
/// first). Everything else is fetched on demand in chunks that never cross the start of the
/// next entry, so reading one entry fetches that entry's bytes and no others: ``chunkBytes``
/// at first, twice as many each time a read continues where the last chunk ended (a large
/// entry read from start to end), up to the fetch limit, so a long read costs few round
/// trips. The most recent chunks, up to ``recentBytes``, are kept for the reads that follow.
///
/// What went wrong in a fetch (a network failure, a server that does not serve ranges) is
/// kept in ``lastFailure``: libzip only knows that a read failed.
final class RangedArchive: ArchiveBytes, PositionedBytes, Sendable {
    let size: Int64
    private let fetch: @Sendable (Range<Int64>) throws -> Data
    private let state = Locked(State())

    /// One fetch's bytes, at `offset`.
    private struct Extent: Sendable {
        var offset: Int64
        var data: Data
        var end: Int64 { offset + Int64(data.count) }
    }

    private struct State: Sendable {
        /// The end records and the central directory: sorted, never overlapping.
        var kept: [Extent] = []
        /// Recent chunks, oldest first.
        var recent: [Extent] = []
        /// Where entries and the central directory start, sorted (chunks stop there).
        var boundaries: [Int64] = []
        /// Each entry's local header offset, by libzip index.
        var entryOffsets: [Int64] = []
        var failure: StoreBackupError?
        var bytesFetched: Int64 = 0
        var requests = 0
    }

    /// The first on-demand fetch at a new place.
    static let chunkBytes: Int64 = 1 << 20
    /// Bytes of recent chunks kept for the reads that follow (the extraction threads read
    /// side by side); the oldest go first.
    static let recentBytes: Int64 = 24 << 20
    /// The end of an archive fetched first: where libzip looks for the end record (the
    /// record, the longest comment and the ZIP64 locator before it; libzip's `CDBUFSIZE`),
    /// and ``CentralDirectoryCheck`` too.
    static let tailBytes: Int64 = 65_536 + 22 + 20

    /// An archive of `size` bytes whose bytes `fetch` reads (at most `maxFetchBytes` at a
    /// time; exactly the bytes asked for, or it throws).
    /// Nothing is fetched until the first read.
    init(size: Int64, maxFetchBytes: Int64, fetch: @escaping @Sendable (Range<Int64>) throws -> Data) {
        self.size = size
        self.maxFetchBytes = maxFetchBytes
        self.fetch = fetch
    }

    /// Lets go of the recent chunks (a manifest, a page map): for a reader that goes on with
    /// exact reads elsewhere (``peek(at:count:)``), which would never use them again.
    func dropRecentChunks() {
        state.withLock { $0.recent = [] }
    }

    /// Fetches the end of the archive, where every reader starts.
    func fetchTail() throws { try willRead(max(0, size - Self.tailBytes)..<max(0, size)) }

    /// The most bytes one fetch asks for.
    let maxFetchBytes: Int64

    /// The failure behind the last fetch that failed, if any.
    var lastFailure: StoreBackupError? { state.current.failure }
    /// Bytes fetched so far, and in how many requests.
    var fetched: (bytes: Int64, requests: Int) { state.withLock { ($0.bytesFetched, $0.requests) } }

    /// Records where the entries (by libzip index) and the central directory start, as
    /// ``CentralDirectoryCheck`` found them: chunks read on demand stop there.
    func setLayout(_ layout: CentralDirectoryCheck.Layout) {
        let sorted = (layout.offsets + [layout.directoryOffset]).sorted()
        state.withLock {
            $0.boundaries = sorted
            $0.entryOffsets = layout.offsets
        }
    }

    /// Where entry `index` starts and where the next entry (or the central directory) does.
    func span(ofEntry index: UInt64) -> Range<Int64>? {
        state.withLock { state in
            guard index < UInt64(state.entryOffsets.count) else { return nil }
            let start = state.entryOffsets[Int(index)]
            let next = Self.firstIndex(in: state.boundaries, after: start) { $0 }
            guard next < state.boundaries.count else { return nil }
            return start..<state.boundaries[next]
        }
    }

    // MARK: ArchiveBytes

    func read(at offset: Int64, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Int(max(0, min(Int64(count), size - offset))))
        var done = 0
        while done < bytes.count {
            let got = try bytes.withUnsafeMutableBytes { buffer in
                try read(at: offset + Int64(done), into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
            }
            guard got > 0 else { break }
            done += got
        }
        return done == bytes.count ? bytes : Array(bytes[0..<done])
    }

    /// `count` bytes at `offset` (fewer where the archive ends), fetching exactly those when
    /// no kept extent or recent chunk holds them all: for a header checked now whose entry is
    /// read later, so that no chunk is fetched in vain.
    func peek(at offset: Int64, count: Int) throws -> [UInt8] {
        let wanted = Int(max(0, min(Int64(count), size - offset)))
        var bytes = [UInt8](repeating: 0, count: wanted)
        guard wanted > 0 else { return bytes }
        let atHand = bytes.withUnsafeMutableBytes { buffer in state.withLock { Self.copy(from: &$0, at: offset, into: buffer) } }
        if atHand == wanted { return bytes }
        return Array(try fetchRecording(offset..<offset + Int64(wanted)))
    }

    /// Fetches what is not kept yet of `range` (in requests of at most the fetch limit) and keeps it.
    func willRead(_ range: Range<Int64>) throws {
        let lower = max(0, range.lowerBound), upper = min(size, range.upperBound)
        guard lower < upper else { return }
        let range = lower..<upper
        var gaps: [Range<Int64>] = []
        var position = range.lowerBound
        state.withLock { state in
            // Kept extents never overlap: sorted by offset, they are sorted by end too.
            var index = Self.firstIndex(in: state.kept, after: position) { $0.end }
            while index < state.kept.count, state.kept[index].offset < range.upperBound {
                let extent = state.kept[index]
                if extent.offset > position { gaps.append(position..<extent.offset) }
                position = max(position, extent.end)
                index += 1
            }
        }
        if position < range.upperBound { gaps.append(position..<range.upperBound) }
        for gap in gaps {
            var start = gap.lowerBound
            while start < gap.upperBound {
                let end = min(gap.upperBound, start + maxFetchBytes)
                let data = try fetchRecording(start..<end)
                state.withLock { state in
                    state.kept.insert(Extent(offset: start, data: data), at: Self.firstIndex(in: state.kept, after: start) { $0.offset })
                }
                start = end
            }
        }
    }

    // MARK: reading

    /// Copies bytes at `offset` into `buffer`: as many as one kept extent or chunk holds,
    /// fetching a chunk when none holds them. 0 at the end of the archive.
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset < size, buffer.count > 0 else { return 0 }
        if let copied = state.withLock({ Self.copy(from: &$0, at: offset, into: buffer) }) { return copied }
        let end = state.withLock { state -> Int64 in
            // A read that continues the last chunk is a long one: fetch more at once.
            let continued = state.recent.last { $0.end == offset }.map { Int64($0.data.count) * 2 } ?? 0
            var end = min(size, offset + min(max(Self.chunkBytes, continued), maxFetchBytes))
            let boundary = Self.firstIndex(in: state.boundaries, after: offset) { $0 }
            if boundary < state.boundaries.count { end = min(end, state.boundaries[boundary]) }
            let next = Self.firstIndex(in: state.kept, after: offset) { $0.offset }
            if next < state.kept.count { end = min(end, state.kept[next].offset) }
            for extent in state.recent where extent.offset > offset { end = min(end, extent.offset) }
            return end
        }
        let data = try fetchRecording(offset..<end)
        return state.withLock { state in
            state.recent.append(Extent(offset: offset, data: data))
            var kept = state.recent.reduce(Int64(0)) { $0 + Int64($1.data.count) }
            while kept > Self.recentBytes, state.recent.count > 1 {
                kept -= Int64(state.recent.removeFirst().data.count)
            }
            return Self.copy(from: &state, at: offset, into: buffer) ?? 0
        }
    }

    private static func copy(from state: inout State, at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        func copy(_ extent: Extent) -> Int {
            let start = Int(offset - extent.offset)
            let count = min(buffer.count, extent.data.count - start)
            extent.data.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + start, byteCount: count) }
            return count
        }
        let after = firstIndex(in: state.kept, after: offset) { $0.offset }
        if after > 0, offset < state.kept[after - 1].end { return copy(state.kept[after - 1]) }
        if let index = state.recent.lastIndex(where: { $0.offset <= offset && offset < $0.end }) {
            let extent = state.recent[index]
            // The most recently used goes last, so eviction takes the least recently used.
            state.recent.remove(at: index)
            state.recent.append(extent)
            return copy(extent)
        }
        return nil
    }

    /// The index of the first element of `sorted` (ascending by `key`) whose key is greater
    /// than `value`; `sorted.count` when there is none. A binary search: the kept extents
    /// and the entry boundaries number as many as the archive's entries.
    private static func firstIndex<Element>(in sorted: [Element], after value: Int64, key: (Element) -> Int64) -> Int {
        var low = 0, high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if key(sorted[middle]) > value { high = middle } else { low = middle + 1 }
        }
        return low
    }

    private func fetchRecording(_ range: Range<Int64>) throws -> Data {
        do {
            let data = try fetch(range)
            guard data.count == range.count else {
                throw StoreBackupError.transferFailed(.other, label: "", "a ranged read returned \(data.count) of \(range.count) bytes")
            }
            state.withLock {
                $0.bytesFetched += Int64(data.count)
                $0.requests += 1
            }
            return data
        } catch let error as StoreBackupError {
            state.withLock { $0.failure = error }
            throw error
        }
    }

    // MARK: libzip

    /// A libzip handle reading this archive (read-only). `ZIP_CHECKCONS` is left out: it
    /// reads every entry's local header, one request each; ``ArchiveReader`` checks the
    /// local header of each entry it reads instead.
    func openHandle(backupName: String) throws -> OpaquePointer {
        try ZipSource.openHandle(over: self, backupName: backupName) { self.lastFailure }
    }
}
