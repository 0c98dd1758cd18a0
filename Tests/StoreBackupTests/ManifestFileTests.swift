import Foundation
import XCTest

@testable import StoreBackup

/// ``Manifest/File`` keeps its SHA-256 as 32 bytes and its type as a byte, and the rarer
/// fields in a shared box: its properties must read and write, compare, encode and decode
/// exactly as plain stored strings did, whatever text a manifest holds.
final class ManifestFileTests: XCTestCase {
    private let digest = "00ff10e9a7b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"

    func testRawSHA256GivesBackItsHexAndRefusesOtherText() {
        for hex in [digest, String(repeating: "0", count: 64), String(repeating: "f", count: 64)] {
            XCTAssertEqual(RawSHA256(hex: hex)?.hex, hex)
        }
        XCTAssertEqual(RawSHA256(hex: digest), RawSHA256(hex: digest))
        XCTAssertNotEqual(RawSHA256(hex: digest), RawSHA256(hex: String(repeating: "0", count: 64)))
        // Not the form storebackup writes: kept as text elsewhere, so never taken as bytes.
        for text in ["", digest.uppercased(), String(digest.dropLast()), digest + "0", "g" + digest.dropFirst(), "not a digest"] {
            XCTAssertNil(RawSHA256(hex: text), text)
        }
    }

    func testEveryPropertyReadsBackWhatWasSet() {
        var file = Manifest.File(path: "a/b", type: "file", size: 12, sha256: digest, mode: 0o644, mtime: -3)
        XCTAssertEqual(file.sha256, digest)
        XCTAssertEqual(file.type, "file")
        XCTAssertNil(file.linkTarget)
        XCTAssertNil(file.source)
        for text in [digest.uppercased(), "short", ""] {
            file.sha256 = text
            XCTAssertEqual(file.sha256, text, "text that is not 64 lowercase hex digits stays as it was")
        }
        file.sha256 = nil
        XCTAssertNil(file.sha256)
        for type in ["directory", "symlink", "database", "fifo", "file", "socket", "", "File"] {
            file.type = type
            XCTAssertEqual(file.type, type)
        }
        file.linkTarget = "../x"
        file.deflateBlockSize = 1 << 20
        file.deflateBlocks = [3, 4]
        file.source = "base"
        XCTAssertEqual(file.linkTarget, "../x")
        XCTAssertEqual(file.deflateBlockSize, 1 << 20)
        XCTAssertEqual(file.deflateBlocks, [3, 4])
        XCTAssertEqual(file.source, "base")
    }

    /// Restore and verify hold one row and one entry per file of the archive: their sizes
    /// are the memory per entry (docs/dev/scale.md), so a field that widens them must be meant.
    func testRowsAndEntriesKeepTheirSize() {
        XCTAssertLessThanOrEqual(MemoryLayout<Manifest.File>.stride, 80)
        XCTAssertLessThanOrEqual(MemoryLayout<ArchiveEntry>.stride, 64)
    }

    /// A listing keeps each SHA-256 as its bytes, and gives back any text as it came.
    func testListingEntriesGiveBackTheirSHA256() {
        var entry = BackupContents.Entry(
            path: "a", type: "file", size: 1, mode: 0o644, modified: Date(timeIntervalSince1970: 0), sha256: digest)
        XCTAssertEqual(entry.sha256, digest)
        for text in [digest.uppercased(), "short", ""] {
            entry.sha256 = text
            XCTAssertEqual(entry.sha256, text)
        }
        entry.sha256 = nil
        XCTAssertNil(entry.sha256)
        let other = BackupContents.Entry(path: "a", type: "file", size: 1, mode: 0o644, modified: Date(timeIntervalSince1970: 0))
        XCTAssertEqual(entry, other)
        entry.sha256 = digest
        XCTAssertNotEqual(entry, other)
    }

    func testCopiesChangeIndependently() {
        let original = Manifest.File(path: "l", type: "symlink", size: 1, sha256: digest, mode: 0o777, mtime: 0, linkTarget: "t")
        var copy = original
        copy.linkTarget = "u"
        copy.sha256 = "other"
        XCTAssertEqual(original.linkTarget, "t")
        XCTAssertEqual(original.sha256, digest)
        XCTAssertEqual(copy.linkTarget, "u")
        XCTAssertEqual(copy.sha256, "other")
    }

    func testEqualityIsTheFieldsEquality() {
        let file = Manifest.File(path: "p", type: "file", size: 1, sha256: digest, mode: 0o600, mtime: 5)
        var same = Manifest.File(path: "p", type: "socket", size: 1, sha256: nil, mode: 0o600, mtime: 5, source: "base")
        XCTAssertNotEqual(file, same)
        same.type = "file"
        same.sha256 = digest
        same.source = nil
        XCTAssertEqual(file, same, "equal values, however they were set")
        same.sha256 = digest.uppercased()
        XCTAssertNotEqual(file, same)
        XCTAssertTrue(file.hasSHA256(digest))
        XCTAssertFalse(file.hasSHA256(digest.uppercased()))
        XCTAssertFalse(file.hasSHA256(nil))
        XCTAssertTrue(same.hasSHA256(digest.uppercased()))
    }

    /// The JSON is what the synthesized `Codable` of plain stored fields gave: the same keys,
    /// absent optionals left out, any text kept.
    func testCodableOutputIsUnchanged() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let rows = [
            Manifest.File(path: "d", type: "directory", size: 0, mode: 0o755, mtime: 1),
            Manifest.File(
                path: "db", type: "database", size: 9, sha256: digest, mode: 0o600, mtime: 2, deflateBlockSize: 4, deflateBlocks: [1, 2],
                source: "pages"),
            Manifest.File(path: "odd", type: "weird", size: 1, sha256: "XYZ", mode: 0o644, mtime: 3, linkTarget: "t"),
        ]
        let text = String(decoding: try encoder.encode(rows), as: UTF8.self)
        XCTAssertEqual(
            text,
            #"[{"mode":493,"mtime":1,"path":"d","size":0,"type":"directory"},"#
                + #"{"deflateBlockSize":4,"deflateBlocks":[1,2],"mode":384,"mtime":2,"path":"db","#
                + #""sha256":"\#(digest)","size":9,"source":"pages","type":"database"},"#
                + #"{"linkTarget":"t","mode":420,"mtime":3,"path":"odd","sha256":"XYZ","size":1,"type":"weird"}]"#)
        XCTAssertEqual(try JSONDecoder().decode([Manifest.File].self, from: Data(text.utf8)), rows)
    }
}
