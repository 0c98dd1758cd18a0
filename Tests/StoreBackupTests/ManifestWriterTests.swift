import Foundation
import XCTest

@testable import StoreBackup

/// The manifest is written row by row (``ManifestWriter``) instead of through JSONEncoder:
/// it must decode to the same manifest, and read as JSONEncoder's text does.
final class ManifestWriterTests: XCTestCase {
    func sample(fileCount: Int) -> Manifest {
        var random = SplitMix64(seed: 34)
        let odd = ["plain.txt", "quote\"d", "back\\slash", "new\nline\ttab\u{1}\u{1f}", "café/naïve/日本語", "a/b/c.bin", "emoji 🎉"]
        var files: [Manifest.File] = []
        for index in 0..<fileCount {
            let name = odd[index % odd.count] + "-\(index)"
            switch index % 4 {
            case 0:
                files.append(.init(path: name, type: "directory", size: 0, sha256: nil, mode: 0o755, mtime: Int64(random.next() >> 33)))
            case 1:
                files.append(
                    .init(
                        path: name, type: "symlink", size: 9, sha256: String(repeating: "a", count: 64), mode: 0o777,
                        mtime: -5, linkTarget: "../" + name))
            case 2:
                files.append(
                    .init(
                        path: name, type: "database", size: 3 << 20, sha256: String(repeating: "0", count: 64), mode: 0o600,
                        mtime: 1_700_000_000, deflateBlockSize: 1 << 20,
                        deflateBlocks: [Int(random.next() >> 45), 17, 1 << 20]))
            default:
                files.append(
                    .init(
                        path: name, type: "file", size: Int64(random.next() >> 20), sha256: String(repeating: "f", count: 64),
                        mode: 0o644, mtime: Int64.max / 3))
            }
        }
        var manifest = Manifest(
            format: Manifest.currentFormat, tool: "storebackup", toolVersion: "0.1.0", hostName: "host \"x\"", sourcePath: "/srv/Stores/é",
            createdAt: Date(timeIntervalSince1970: 1_764_196_000), compressionLevel: 1, rootMode: 0o750, rootMtime: 1_600_000_001,
            files: files,
            databases: [.init(path: "App.sqlite", pageSize: 4096, pageCount: 77, journalMode: "wal", snapshotMethod: "read-transaction")])
        manifest.outsideLinks = ["shared-config", "assets"]
        manifest.leftOut = ["app.sock (a socket)"]
        return manifest
    }

    func testWrittenManifestDecodesToTheSameManifest() throws {
        for count in [0, 1, 5, 101] {
            var manifest = sample(fileCount: count)
            XCTAssertEqual(try Manifest.decode(try manifest.encoded()), manifest, "\(count) files")
            manifest.rootMode = nil
            manifest.rootMtime = nil
            manifest.databases = []
            manifest.outsideLinks = nil
            manifest.leftOut = nil
            XCTAssertEqual(try Manifest.decode(try manifest.encoded()), manifest, "\(count) files, optional fields absent")
        }
    }

    /// Same JSON values as JSONEncoder gives (compared as parsed objects: whitespace and
    /// escape spellings may differ), so other readers see no change.
    func testWrittenManifestMatchesJSONEncoder() throws {
        let manifest = sample(fileCount: 29)
        let ours = try JSONSerialization.jsonObject(with: try manifest.encoded()) as? NSDictionary
        let theirs = try JSONSerialization.jsonObject(with: try manifest.encodedByFoundation()) as? NSDictionary
        XCTAssertNotNil(ours)
        XCTAssertEqual(ours, theirs)
    }

    /// The format-3 fields (incremental backups) round-trip and read as JSONEncoder's do.
    func testFormat3FieldsMatchJSONEncoder() throws {
        let manifest = incrementalSample(fileCount: 9)
        XCTAssertEqual(try Manifest.decode(try manifest.encoded()), manifest)
        let ours = try JSONSerialization.jsonObject(with: try manifest.encoded()) as? NSDictionary
        let theirs = try JSONSerialization.jsonObject(with: try manifest.encodedByFoundation()) as? NSDictionary
        XCTAssertNotNil(ours)
        XCTAssertEqual(ours, theirs)
    }

    /// Format 4's block hashes are written as JSONEncoder writes them (lower-case hex, in order).
    func testBlockHashesMatchJSONEncoder() throws {
        var manifest = sample(fileCount: 4)
        manifest.format = 4
        manifest.files[2].deflateBlockSize = 1 << 20
        manifest.files[2].deflateBlocks = [5, 6]
        manifest.files[2].deflateBlockHashes = [RawSHA256(bytes: Array(0..<32))!, RawSHA256(bytes: Array(repeating: 255, count: 32))!]
        XCTAssertEqual(manifest.files[2].deflateBlockHashes?[0].hex, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
        XCTAssertEqual(try Manifest.decode(try manifest.encoded()), manifest)
        let ours = try JSONSerialization.jsonObject(with: try manifest.encoded()) as? NSDictionary
        let theirs = try JSONSerialization.jsonObject(with: try manifest.encodedByFoundation()) as? NSDictionary
        XCTAssertNotNil(ours)
        XCTAssertEqual(ours, theirs)
    }

    /// Format 4's page delta rows (one with a block list and hashes, one of a single block)
    /// round-trip and read as JSONEncoder's do; a manifest without them has no such key.
    func testPageDeltasMatchJSONEncoder() throws {
        var manifest = incrementalSample(fileCount: 5)
        manifest.format = 4
        XCTAssertFalse(String(decoding: try manifest.encoded(), as: UTF8.self).contains("pageDeltas"))
        manifest.pageDeltas = [
            .init(
                path: "App.sqlite", size: 3_000_000, sha256: String(repeating: "d", count: 64), deflateBlockSize: 1 << 20,
                deflateBlocks: [400_000, 399_999, 200_000],
                deflateBlockHashes: [0, 1, 2].map { RawSHA256(bytes: Array(repeating: UInt8($0), count: 32))! }),
            .init(path: "B \"quoted\".sqlite", size: 4_120, sha256: String(repeating: "e", count: 64)),
        ]
        XCTAssertEqual(try Manifest.decode(try manifest.encoded()), manifest)
        let ours = try JSONSerialization.jsonObject(with: try manifest.encoded()) as? NSDictionary
        let theirs = try JSONSerialization.jsonObject(with: try manifest.encodedByFoundation()) as? NSDictionary
        XCTAssertNotNil(ours)
        XCTAssertEqual(ours, theirs)
    }

    /// `sample(fileCount:)` as an incremental (format 3) with every chain field set.
    private func incrementalSample(fileCount: Int) -> Manifest {
        var manifest = sample(fileCount: fileCount)
        manifest.format = 3
        manifest.kind = "incremental"
        manifest.base = .init(
            name: "2026-11-27 020000 Stores.zip", manifestSHA256: String(repeating: "c", count: 64),
            createdAt: Date(timeIntervalSince1970: 1_764_200_000))
        manifest.chainLength = 2
        manifest.hashSalt = "00112233445566778899aabbccddeeff"
        manifest.pageMaps = [.init(path: "App.sqlite", hash: "hmac-sha256-128", complete: false)]
        manifest.files[2].source = "pages"
        manifest.files[3].source = "base"
        return manifest
    }

    /// Every optional field and every kind of value, format 3: what the layout fixture holds.
    func layoutSample() -> Manifest {
        var manifest = incrementalSample(fileCount: 13)
        manifest.pageMaps?.append(.init(path: "B.sqlite", hash: "sha256-128", complete: true))
        manifest.files[6].deflateBlocks = []
        manifest.leftOut = []
        return manifest
    }

    /// The text is byte for byte the layout earlier versions wrote (Fixtures/manifest-layout.json,
    /// written by the JSONEncoder-shaped writer of 0.1.0): the manifest's SHA-256 names an
    /// incremental's base, and tools may compare manifests as text.
    func testTextKeepsTheLayoutByteForByte() throws {
        let fixture = Bundle.module.resourceURL!.appendingPathComponent("Fixtures/manifest-layout.json")
        XCTAssertEqual(ManifestWriter.encode(layoutSample()), try Data(contentsOf: fixture))
    }

    /// Parts of any size (create deflates the text part by part) join into the same text.
    func testPartsJoinIntoTheWholeText() throws {
        for manifest in [layoutSample(), sample(fileCount: 0), sample(fileCount: 1), sample(fileCount: 101)] {
            let whole = ManifestWriter.encode(manifest)
            for partSize in [1, 7, 300, 5000, 1 << 20] {
                var writer = ManifestWriter(manifest)
                var joined = Data()
                var part: [UInt8] = []
                var parts = 0
                while writer.next(into: &part, atLeast: partSize) {
                    XCTAssertFalse(part.isEmpty)
                    joined.append(contentsOf: part)
                    parts += 1
                }
                XCTAssertTrue(writer.isFinished)
                XCTAssertTrue(part.isEmpty)
                XCTAssertEqual(joined, whole, "\(manifest.files.count) files in parts of \(partSize) bytes")
                if partSize == 1 { XCTAssertGreaterThan(parts, manifest.files.count) }
            }
        }
    }
}
