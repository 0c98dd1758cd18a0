import Foundation

/// Which parts of a file filled in pieces, out of order and several at once (a backup
/// downloaded by parallel ranged requests), have arrived, so that the file can be read
/// while it is still being written: a read waits until its bytes are there.
///
/// The file is cut into chunks of ``chunkBytes``. Each fetcher takes the next chunk with
/// ``nextChunks(most:)``: first a chunk a reader is waiting for, else the one after the chunk
/// taken last, so the file comes in order from wherever reading last jumped to, and only
/// at the end the chunks left before it. Readers never wait for a chunk nobody fetches.
///
/// Until a reader asks for more than the file's end (where a ZIP reader starts: its end
/// records and central directory), fetchers take only what readers wait for: fetching
/// ahead from the start would fill the link with bytes read last while the reader waits
/// for the end, then for wherever it goes next. ``fetchEverything()`` lifts that.
/// A failure (``fail(_:)``) lets every waiting reader and fetcher go with that error.
// Unchecked: every property but the constants is used only with `monitor` locked.
final class ArrivingFile: @unchecked Sendable {
    /// The file's final size in bytes.
    let size: Int64
    /// The size of each chunk (the last may be shorter).
    let chunkBytes: Int64
    private let monitor = Monitor()
    /// Readers wait for chunks to arrive.
    private let arrivedCondition: Monitor.Condition
    private var taken: [Bool]
    private var arrived: [Bool]
    private var takenCount = 0
    private var arrivedCount = 0
    private var arrivedByteCount: Int64 = 0
    /// No chunk before this one is left to take (so finding one costs no scan from the start).
    private var firstUntaken = 0
    /// Where the next chunk is taken from when no reader waits.
    private var cursor = 0
    /// How many readers wait for each chunk.
    private var awaited: [Int: Int] = [:]
    /// Whether fetchers may take chunks nobody waits for yet.
    private var fetchingAhead = false
    /// Chunks from here on hold the file's last ``endBytes``.
    private let firstEndChunk: Int
    /// Fetchers wait for a chunk to take.
    private let wantedCondition: Monitor.Condition
    private var failure: Error?

    init(size: Int64, chunkBytes: Int64) {
        precondition(size >= 0 && chunkBytes > 0)
        self.size = size
        self.chunkBytes = chunkBytes
        let count = Int((size + chunkBytes - 1) / chunkBytes)
        taken = Array(repeating: false, count: count)
        arrived = Array(repeating: false, count: count)
        arrivedCondition = monitor.makeCondition()
        wantedCondition = monitor.makeCondition()
        firstEndChunk = Int(max(0, size - Self.endBytes) / chunkBytes)
    }

    /// The end of a file that readers start with (a ZIP's end records, the longest comment
    /// and a small central directory).
    static let endBytes: Int64 = 128 << 10

    /// The number of chunks.
    var chunkCount: Int { arrived.count }

    /// The bytes of chunk `index`.
    func range(ofChunk index: Int) -> Range<Int64> {
        Int64(index) * chunkBytes..<min(size, Int64(index + 1) * chunkBytes)
    }

    /// The chunks a fetcher fetches next in one request, waiting until there is one to
    /// take: a chunk a reader waits for alone (it comes soonest that way), else up to
    /// `most` chunks in a row (fewer requests for a long stretch nobody waits for yet).
    /// nil when every chunk is taken or the file failed.
    func nextChunks(most: Int) -> Range<Int>? {
        monitor.lock()
        defer { monitor.unlock() }
        var chosen: Int?
        while chosen == nil {
            guard failure == nil, takenCount < taken.count else { return nil }
            chosen = awaited.keys.filter { !taken[$0] }.min()
            if chosen == nil && fetchingAhead {
                var next = cursor
                while next < taken.count && taken[next] { next += 1 }
                if next == taken.count {
                    while taken[firstUntaken] { firstUntaken += 1 }
                    next = firstUntaken
                }
                chosen = next
            }
            // Woken by each new wait of a reader; the timeout only bounds a missed wake-up.
            if chosen == nil { wantedCondition.wait(seconds: 1) }
        }
        guard let chosen else { return nil }
        var end = chosen + 1
        if awaited[chosen] == nil {
            while end < taken.count && end - chosen < most && !taken[end] && awaited[end] == nil { end += 1 }
        }
        for index in chosen..<end { taken[index] = true }
        takenCount += end - chosen
        cursor = end
        return chosen..<end
    }

    /// Records that chunk `index` is written in the file.
    func markArrived(_ index: Int) {
        monitor.lock()
        if !arrived[index] {
            arrived[index] = true
            arrivedCount += 1
            arrivedByteCount += Int64(range(ofChunk: index).count)
        }
        arrivedCondition.broadcast()
        monitor.unlock()
    }

    /// Ends the file with `error` (the first one is kept): readers waiting and readers to
    /// come throw it, and fetchers get no more chunks.
    func fail(_ error: Error) {
        monitor.lock()
        // A file complete stays complete: a late stop is no failure of it.
        if failure == nil && arrivedCount < arrived.count { failure = error }
        arrivedCondition.broadcast()
        wantedCondition.broadcast()
        monitor.unlock()
    }

    /// The error the file failed with, if it did.
    var failed: Error? {
        monitor.lock()
        defer { monitor.unlock() }
        return failure
    }

    /// Bytes arrived so far.
    var arrivedBytes: Int64 {
        monitor.lock()
        defer { monitor.unlock() }
        return arrivedByteCount
    }

    /// Waits until every byte of `range` has arrived; throws the file's failure instead.
    func waitUntilArrived(_ range: Range<Int64>) throws {
        let lower = max(0, range.lowerBound), upper = min(size, range.upperBound)
        guard lower < upper else { return }
        let first = Int(lower / chunkBytes), last = Int((upper - 1) / chunkBytes)
        monitor.lock()
        defer { monitor.unlock() }
        for index in first...last {
            if let failure { throw failure }
            guard !arrived[index] else { continue }
            awaited[index, default: 0] += 1
            if index < firstEndChunk { fetchingAhead = true }
            wantedCondition.broadcast()
            defer {
                awaited[index]! -= 1
                if awaited[index] == 0 { awaited[index] = nil }
            }
            // Woken by each arrival; the timeout only bounds a missed wake-up.
            while !arrived[index] && failure == nil { arrivedCondition.wait(seconds: 1) }
        }
        if let failure { throw failure }
    }

    /// Lets fetchers take every chunk left, in order, whether a reader waits for it or not.
    func fetchEverything() {
        monitor.lock()
        fetchingAhead = true
        wantedCondition.broadcast()
        monitor.unlock()
    }

    /// Waits until the whole file has arrived; throws the file's failure instead, or
    /// `cancelled` once `cancel` is set.
    func waitUntilComplete(cancel: CancellationFlag) throws {
        monitor.lock()
        defer { monitor.unlock() }
        while arrivedCount < arrived.count && failure == nil {
            if cancel.isCancelled { throw StoreBackupError.cancelled }
            arrivedCondition.wait(seconds: 0.5)
        }
        if let failure { throw failure }
    }
}
