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

    /// A dropped block's array is handed out once to be inflated into again; a reader that
    /// still holds that block keeps its bytes when the next block is written into it.
    func testADroppedBlockIsReusedWithoutChangingItsHolder() throws {
        let cache = InflatedBlockCache(capacity: 1)
        let (a, b) = (BlockKey(entry: 3, number: 0), BlockKey(entry: 3, number: 1))
        cache.keep(bytes(1), as: a)
        let held = cache.block(a)
        XCTAssertNil(cache.takeSpare(count: 1000), "nothing dropped yet")
        cache.keep(bytes(2), as: b)
        XCTAssertNil(cache.takeSpare(count: 999), "a spare of another size is not handed out")
        cache.keep(bytes(1), as: a)
        var spare = try XCTUnwrap(cache.takeSpare(count: 1000))
        XCTAssertNil(cache.takeSpare(count: 1000), "handed out once")
        let heldAgain = cache.block(a)
        cache.keep(bytes(4), as: b)
        spare = cache.takeSpare(count: 1000) ?? spare
        spare.withUnsafeMutableBytes { $0.initializeMemory(as: UInt8.self, repeating: 0xEE) }
        XCTAssertEqual(held, bytes(1))
        XCTAssertEqual(heldAgain, bytes(1), "the holder's block is not overwritten")
    }

    func testEntryKeysAreNeverReused() {
        let first = BlockKey.newEntry(), second = BlockKey.newEntry()
        XCTAssertNotEqual(first, second)
    }
}
