import XCTest

@testable import StoreBackup

/// The scan's items keep their paths in one arena (``StorePaths``): every path, folder and
/// link target must come back exactly, across chunks, and the item must stay compact.
final class StorePathsTests: XCTestCase {
    func testPathsComeBackExactlyAcrossChunks() {
        let paths = StorePaths(root: "/stores/My%20Store")
        var expected: [(relative: String, target: String?)] = []
        var items: [StoreItem] = []
        // Enough names of varied lengths to fill several 256 KiB chunks, in folders that
        // come back after others (a walk returns to a folder after its subfolders).
        var random = SplitMix64(seed: 7)
        let folders = ["", "a", "a/b", ".App_SUPPORT/_EXTERNAL_DATA", "a", "caf\u{e9}/%FF"]
        for index in 0..<30_000 {
            let folder = folders[index / 5_000]
            let name = "n\(index)-" + String(repeating: "x", count: Int(random.next() % 200))
            let relative = folder.isEmpty ? name : folder + "/" + name
            let target: String? = index % 7 == 0 ? String(repeating: "t", count: Int(random.next() % 300)) : nil
            expected.append((relative, target))
            items.append(
                StoreItem(
                    in: paths, relativePath: relative, kind: target == nil ? .file : .symlink, permissions: 0o644,
                    modificationTime: Int64(index), size: Int64(index), linkTarget: target))
        }
        for (item, wanted) in zip(items, expected) {
            XCTAssertEqual(item.relativePath, wanted.relative)
            XCTAssertEqual(item.linkTarget, wanted.target)
            XCTAssertEqual(item.absolutePath, "/stores/My%20Store/" + wanted.relative)
        }
    }

    func testAnItemOutsideTheStoreKeepsItsWholePath() {
        let item = StoreItem(
            relativePath: ".storebackup/pages/App.sqlite", absolutePath: "/tmp/scratch/pages-1", kind: .file,
            permissions: 0o644, modificationTime: 0, size: 10, linkTarget: nil)
        XCTAssertEqual(item.relativePath, ".storebackup/pages/App.sqlite")
        XCTAssertEqual(item.absolutePath, "/tmp/scratch/pages-1")
        XCTAssertNil(item.linkTarget)
    }

    /// A store of many files keeps an item per file until the archive is closed.
    func testAnItemIsCompact() {
        XCTAssertLessThanOrEqual(MemoryLayout<StoreItem>.stride, 48)
    }
}
