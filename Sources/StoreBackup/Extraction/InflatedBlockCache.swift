import Foundation

/// Inflated blocks, each checked against its hash, kept for reuse within a budget of
/// blocks, least recently used dropped first. Each ``EntryBlockReader`` has one of its own,
/// or shares one with others (the page deltas of a chain), so that the blocks of many
/// entries stay within one budget however many entries there are.
// Unchecked: every mutable property is used with `lock` held.
final class InflatedBlockCache: @unchecked Sendable {
    /// A block of one reader: readers take an owner number each (a reader's address could
    /// be taken again by a later one).
    private struct Key: Hashable {
        let owner: Int
        let number: Int
    }

    /// How many blocks it keeps.
    let capacity: Int
    private let lock = NSLock()
    private var blocks: [Key: [UInt8]] = [:]
    /// Least recently used first.
    private var recency: [Key] = []
    private var owners = 0

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// A budget of `bytes` in blocks of `blockSize`, at least `minimum` blocks.
    convenience init(bytes: Int, blockSize: Int, minimum: Int) {
        self.init(capacity: max(minimum, bytes / max(1, blockSize)))
    }

    /// A number no other reader of this cache has.
    func newOwner() -> Int {
        lock.lock()
        defer { lock.unlock() }
        owners += 1
        return owners
    }

    /// Block `number` of `owner`, if kept (it becomes the most recently used).
    func block(owner: Int, number: Int) -> [UInt8]? {
        lock.lock()
        defer { lock.unlock() }
        let key = Key(owner: owner, number: number)
        guard let found = blocks[key] else { return nil }
        recency.removeAll { $0 == key }
        recency.append(key)
        return found
    }

    /// Keeps `plain` as block `number` of `owner`, dropping the least recently used beyond the budget.
    func keep(_ plain: [UInt8], owner: Int, number: Int) {
        lock.lock()
        defer { lock.unlock() }
        let key = Key(owner: owner, number: number)
        if blocks.updateValue(plain, forKey: key) != nil {
            recency.removeAll { $0 == key }
        } else if recency.count >= capacity {
            blocks[recency.removeFirst()] = nil
        }
        recency.append(key)
    }
}
