import Foundation

/// The batches of one database scan in a ring of buffers: one thread reads batch after
/// batch into the ring, others hash the pages of each batch (and one the whole file, in
/// order), and the scanning thread compares and writes each batch once its pages are
/// hashed. Reading, hashing and writing overlap, and no thread waits for a whole batch
/// group to end before the next starts, so every core keeps hashing.
///
/// Batch `b` lives in slot `b % slots`; a slot is read again only when the scanning thread
/// and the whole-file hasher are both done with the batch it held.
// Unchecked: every counter is guarded by `condition`; a slot's bytes are written by the
// reader before it marks the batch read, and only read by others after that, until freed.
final class PageBatchRing: @unchecked Sendable {
    let slots: Int
    let slotBytes: Int
    let hashBytesPerSlot: Int
    /// Bytes of quick-map values per slot (``QuickPageMap``): the batch's own, and the base's.
    let quickBytesPerSlot: Int
    private let buffers: UnsafeMutableRawBufferPointer
    private let hashes: UnsafeMutableRawBufferPointer
    private let quick: UnsafeMutableRawBufferPointer
    private let baseQuick: UnsafeMutableRawBufferPointer
    private let baseHashes: UnsafeMutableRawBufferPointer
    /// Per slot: how many of the batch's first pages have base values (set by the reader).
    private var baseKnown: [Int]
    private let pageHashers: Int
    private let hashesWholeFile: Bool

    private let condition = NSCondition()
    private var read = 0
    private var pageHashersDone: [Int]
    private var fileHashed = 0
    private var consumed = 0
    private var stopped = false
    private var failure: Error?

    init(slots: Int, slotBytes: Int, hashBytesPerSlot: Int, quickBytesPerSlot: Int, pageHashers: Int, hashesWholeFile: Bool) {
        self.slots = slots
        self.slotBytes = slotBytes
        self.hashBytesPerSlot = hashBytesPerSlot
        self.quickBytesPerSlot = quickBytesPerSlot
        self.pageHashers = pageHashers
        self.hashesWholeFile = hashesWholeFile
        buffers = .allocate(byteCount: slots * slotBytes, alignment: 4096)
        hashes = .allocate(byteCount: slots * hashBytesPerSlot, alignment: 16)
        quick = .allocate(byteCount: max(1, slots * quickBytesPerSlot), alignment: 16)
        baseQuick = .allocate(byteCount: max(1, slots * quickBytesPerSlot), alignment: 16)
        baseHashes = .allocate(byteCount: slots * hashBytesPerSlot, alignment: 16)
        pageHashersDone = Array(repeating: 0, count: slots)
        baseKnown = Array(repeating: 0, count: slots)
    }

    deinit {
        buffers.deallocate()
        hashes.deallocate()
        quick.deallocate()
        baseQuick.deallocate()
        baseHashes.deallocate()
    }

    /// Batch `batch`'s page bytes (the whole slot).
    func pages(of batch: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: buffers[(batch % slots * slotBytes)..<((batch % slots + 1) * slotBytes)])
    }

    /// Batch `batch`'s page hashes (the whole slot).
    func hashes(of batch: Int) -> UnsafeMutableRawBufferPointer {
        let start = batch % slots * hashBytesPerSlot
        return UnsafeMutableRawBufferPointer(rebasing: hashes[start..<(start + hashBytesPerSlot)])
    }

    /// Batch `batch`'s quick values (the whole slot).
    func quickValues(of batch: Int) -> UnsafeMutableRawBufferPointer { slice(quick, quickBytesPerSlot, batch) }

    /// The base's quick values and page hashes for batch `batch` (the whole slots), which the
    /// reader fills for the first ``baseKnown(_:)`` pages.
    func base(of batch: Int) -> (quick: UnsafeMutableRawBufferPointer, hashes: UnsafeMutableRawBufferPointer) {
        (slice(baseQuick, quickBytesPerSlot, batch), slice(baseHashes, hashBytesPerSlot, batch))
    }

    /// The reader: the first `count` pages of batch `batch` have base values (before ``markRead(_:)``).
    func setBaseKnown(_ batch: Int, _ count: Int) { update { $0.baseKnown[batch % $0.slots] = count } }

    /// How many of batch `batch`'s first pages have base values (after ``waitForRead(_:)``).
    func baseKnown(_ batch: Int) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return baseKnown[batch % slots]
    }

    private func slice(_ buffer: UnsafeMutableRawBufferPointer, _ bytes: Int, _ batch: Int) -> UnsafeMutableRawBufferPointer {
        let start = batch % slots * bytes
        return UnsafeMutableRawBufferPointer(rebasing: buffer[start..<(start + bytes)])
    }

    /// The reader: waits until batch `batch`'s slot is free. False: the scan stopped.
    func waitForFreeSlot(_ batch: Int) -> Bool {
        wait { $0.consumed > batch - $0.slots && (!$0.hashesWholeFile || $0.fileHashed > batch - $0.slots) }
    }

    /// The reader: batch `batch` is in its slot.
    func markRead(_ batch: Int) { update { $0.read = batch + 1 } }

    /// A hasher: waits until batch `batch` was read. False: the scan stopped.
    func waitForRead(_ batch: Int) -> Bool { wait { $0.read > batch } }

    /// A page hasher is done with its pages of batch `batch`.
    func markPagesHashed(_ batch: Int) { update { $0.pageHashersDone[batch % $0.slots] += 1 } }

    /// The whole-file hasher is done with batch `batch`.
    func markFileHashed(_ batch: Int) { update { $0.fileHashed = batch + 1 } }

    /// The scanning thread: waits until every page of batch `batch` is hashed. False: stopped.
    func waitForPageHashes(_ batch: Int) -> Bool { wait { $0.pageHashersDone[batch % $0.slots] == $0.pageHashers } }

    /// The scanning thread is done with batch `batch`: its slot may be read again.
    func markConsumed(_ batch: Int) {
        update {
            $0.pageHashersDone[batch % $0.slots] = 0
            $0.consumed = batch + 1
        }
    }

    /// The scanning thread: waits until the whole-file hasher is done with `batches` batches.
    func waitForFileHash(_ batches: Int) -> Bool { wait { $0.fileHashed >= batches } }

    /// Stops every thread at its next wait; the first error is kept for ``error``.
    func stop(_ error: Error?) {
        update {
            if $0.failure == nil { $0.failure = error }
            $0.stopped = true
        }
    }

    /// Why the scan stopped (nil: it was stopped without an error).
    var error: Error? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    private func wait(until ready: (PageBatchRing) -> Bool) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !stopped && !ready(self) { condition.wait() }
        return ready(self) && !(stopped && failure != nil)
    }

    private func update(_ change: (PageBatchRing) -> Void) {
        condition.lock()
        change(self)
        condition.broadcast()
        condition.unlock()
    }
}
