import Foundation
import XCTest

@testable import StoreBackup

/// The cache of inflated blocks (``InflatedBlockCache``): least recently used dropped first,
/// blocks of several entries within one budget, and with a ``BlockSpill`` the dropped blocks
/// read back from the spill instead of lost.
final class InflatedBlockCacheTests: XCTestCase {
    private func bytes(_ seed: UInt8, count: Int = 1000) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: Int($0) * 7) &+ seed } }

    func testTheLeastRecentlyUsedBlockIsDroppedFirst() {
        let cache = InflatedBlockCache(capacity: 2)
        let (a, b, c) = (BlockKey(entry: 1, number: 0), BlockKey(entry: 2, number: 0), BlockKey(entry: 1, number: 1))
        cache.keep(bytes(1), as: a)
        cache.keep(bytes(2), as: b)
        XCTAssertEqual(cache.block(a), bytes(1), "used again: b is now the least recent")
        cache.keep(bytes(3), as: c)
        XCTAssertNil(cache.block(b))
        XCTAssertEqual(cache.block(a), bytes(1))
        XCTAssertEqual(cache.block(c), bytes(3))
    }

    func testDroppedBlocksAreReadBackFromTheSpill() {
        let spill = BlockSpill()
        let cache = InflatedBlockCache(capacity: 1, spill: spill)
        let keys = (0..<5).map { BlockKey(entry: 9, number: $0) }
        for (index, key) in keys.enumerated() { cache.keep(bytes(UInt8(index), count: 1000 + index), as: key) }
        for (index, key) in keys.enumerated().reversed() {
            XCTAssertEqual(cache.block(key), bytes(UInt8(index), count: 1000 + index), "block \(index)")
        }
        XCTAssertTrue(spill.holds(keys[0]))
        // A sibling's cache (another thread) shares the spill.
        let sibling = InflatedBlockCache(capacity: 1, spill: spill)
        XCTAssertEqual(sibling.block(keys[2]), bytes(2, count: 1002))
        XCTAssertNil(sibling.block(BlockKey(entry: 10, number: 0)))
    }

    func testEntryKeysAreNeverReused() {
        let first = BlockKey.newEntry(), second = BlockKey.newEntry()
        XCTAssertNotEqual(first, second)
    }
}
