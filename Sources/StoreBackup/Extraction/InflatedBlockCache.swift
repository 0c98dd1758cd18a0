import Foundation

/// Inflated blocks, each checked against its hash, kept for reuse within a budget of
/// blocks, least recently used dropped first. Each ``EntryBlockReader`` has one of its own,
/// or shares one with others (the page deltas of a chain), so that the blocks of many
/// entries stay within one budget however many entries there are. With a ``BlockSpill``,
/// a dropped block goes there, and is read back from there when asked for again.
// Unchecked: every mutable property is used with `lock` held.
final class InflatedBlockCache: @unchecked Sendable {
    /// How many blocks it keeps in memory.
    let capacity: Int
    let spill: BlockSpill?
    private let lock = NSLock()
    private var blocks: [BlockKey: [UInt8]] = [:]
    /// Least recently used first.
    private var recency: [BlockKey] = []
    /// The last block dropped, whose array the next block is inflated into: a fresh 1 MiB
    /// array for every block costs the kernel's page faults on every block, as the
    /// allocator hands such arrays back to it when they are freed.
    private var spare: [UInt8]?

    init(capacity: Int, spill: BlockSpill? = nil) {
        self.capacity = max(1, capacity)
        self.spill = spill
    }

    /// A budget of `bytes` in blocks of `blockSize`, at least `minimum` blocks.
    convenience init(bytes: Int, blockSize: Int, minimum: Int, spill: BlockSpill? = nil) {
        self.init(capacity: max(minimum, bytes / max(1, blockSize)), spill: spill)
    }

    /// Block `key`, if kept in memory or spilled (it becomes the most recently used).
    func block(_ key: BlockKey) -> [UInt8]? {
        lock.lock()
        if let found = blocks[key] {
            recency.removeAll { $0 == key }
            recency.append(key)
            lock.unlock()
            return found
        }
        lock.unlock()
        guard let spilled = spill?.load(key) else { return nil }
        keep(spilled, as: key)
        return spilled
    }

    /// Keeps `plain` as block `key`, dropping the least recently used beyond the budget
    /// (into the spill, when there is one).
    func keep(_ plain: [UInt8], as key: BlockKey) {
        var dropped: (key: BlockKey, bytes: [UInt8])?
        lock.lock()
        if blocks.updateValue(plain, forKey: key) != nil {
            recency.removeAll { $0 == key }
        } else if recency.count >= capacity {
            let oldest = recency.removeFirst()
            dropped = blocks.removeValue(forKey: oldest).map { (oldest, $0) }
        }
        recency.append(key)
        lock.unlock()
        guard let dropped else { return }
        // Written outside the lock: other readers' blocks need not wait for the disk.
        if let spill, !spill.holds(dropped.key) { spill.store(dropped.bytes, as: dropped.key) }
        lock.withLock { spare = dropped.bytes }
    }

    /// An array of `count` bytes (stale ones) to inflate a block into, if a dropped block
    /// left one. A reader still holding that block keeps its bytes: writing into the
    /// array copies it first then.
    func takeSpare(count: Int) -> [UInt8]? {
        lock.withLock {
            defer { spare = nil }
            return spare?.count == count ? spare : nil
        }
    }
}
