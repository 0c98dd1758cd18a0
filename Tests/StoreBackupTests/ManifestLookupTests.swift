import XCTest

@testable import StoreBackup

/// ``ManifestLookup`` orders and matches paths by their bytes: the same order as comparing
/// their UTF-8 views, two spellings of one name as two paths, a prefix before what extends it.
final class ManifestLookupTests: XCTestCase {
    private let paths = [
        "", "a", "a/b", "a/b/c", "ab", "a%2Fb", "caf\u{e9}", "cafe\u{301}", "Z", "z", ".storebackup", ".App_SUPPORT/_EXTERNAL_DATA/0A",
        ".App_SUPPORT/_EXTERNAL_DATA/0a", "\u{1F600}", "dir\\file", "%FF%FE", "a\u{0}b", "\u{7F}", "\u{80}",
    ]

    func testByteOrderMatchesTheUTF8ViewsOrder() {
        for a in paths {
            for b in paths {
                let expected = a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : (a.utf8.elementsEqual(b.utf8) ? 0 : 1)
                XCTAssertEqual(ManifestLookup.compareBytes(a, b).signum(), expected, "\(a.debugDescription) vs \(b.debugDescription)")
            }
        }
    }

    func testEveryPathIsFoundAndNoOtherOne() throws {
        var random = SplitMix64(seed: 12)
        var names = Set(paths.filter { !$0.isEmpty })
        while names.count < 3_000 {
            names.insert(".App_SUPPORT/_EXTERNAL_DATA/" + String(random.next() % 1_000_000, radix: 16))
        }
        let files = names.sorted().shuffled(using: &random).map { Manifest.File(path: $0, type: "file", size: 1, mode: 0o644, mtime: 0) }
        let lookup = try ManifestLookup(files: files)
        for (row, file) in files.enumerated() {
            XCTAssertEqual(lookup.index(of: file.path), row, file.path)
        }
        for missing in ["", "a/", "cafe", ".App_SUPPORT/_EXTERNAL_DATA/", "zz"] where !names.contains(missing) {
            XCTAssertNil(lookup.index(of: missing), missing)
        }
        var previous: String?
        lookup.forEachPathInOrder { path in
            if let previous { XCTAssert(previous.utf8.lexicographicallyPrecedes(path.utf8), "\(previous) before \(path)") }
            previous = path
        }
    }

    func testTheSamePathTwiceIsRefused() {
        let files = ["x", "caf\u{e9}", "y", "caf\u{e9}"].map { Manifest.File(path: $0, type: "file", size: 1, mode: 0o644, mtime: 0) }
        XCTAssertThrowsError(try ManifestLookup(files: files)) { error in
            XCTAssertEqual((error as? ManifestLookup.DuplicatePath)?.path, "caf\u{e9}")
        }
        // Two spellings of one name are two paths.
        let spellings = ["caf\u{e9}", "cafe\u{301}"].map { Manifest.File(path: $0, type: "file", size: 1, mode: 0o644, mtime: 0) }
        XCTAssertNoThrow(try ManifestLookup(files: spellings))
    }
}
