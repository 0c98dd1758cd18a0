import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// Restore and verify decode the manifest as it streams (``ManifestStreamDecoder``) instead
/// of through JSONDecoder: the same manifest must come out of the same text, in whatever
/// pieces the text arrives, and text JSONDecoder refuses must be refused.
final class ManifestStreamDecoderTests: XCTestCase {
    /// Decodes `text` handed over `chunk` bytes at a time.
    private func streamed(_ text: Data, chunk: Int, maxRows: Int = 1_000, entries: [ArchiveEntry] = []) throws -> (Manifest, String) {
        var offset = 0
        let result = try ManifestStreamDecoder.decode(maxBytes: 1 << 20, maxRows: maxRows, entries: entries) { buffer in
            let count = min(chunk, buffer.count, text.count - offset)
            text.copyBytes(to: buffer.bindMemory(to: UInt8.self), from: offset..<(offset + count))
            offset += count
            return count
        }
        return (result.manifest, result.sha256)
    }

    /// Rows of every kind, with names that need escapes in JSON (and in format 1, as paths).
    private func sample(fileCount: Int) -> Manifest {
        let odd = ["plain.txt", "quote\"d", "back\\slash", "new\nline\ttab\u{1}", "café/naïve/日本語", "emoji 🎉", "100%"]
        let files = (0..<fileCount).map { index -> Manifest.File in
            let name = odd[index % odd.count] + "-\(index)"
            switch index % 4 {
            case 0: return .init(path: name, type: "directory", size: 0, sha256: nil, mode: 0o755, mtime: -5)
            case 1:
                return .init(
                    path: name, type: "symlink", size: 9, sha256: String(repeating: "a", count: 64), mode: 0o777, mtime: 1,
                    linkTarget: "../" + name)
            case 2:
                return .init(
                    path: name, type: "database", size: 3 << 20, sha256: String(repeating: "0", count: 64), mode: 0o600,
                    mtime: 1_700_000_000, deflateBlockSize: 1 << 20, deflateBlocks: [index, 17, 1 << 20])
            default:
                return .init(
                    path: name, type: "file", size: Int64(index) << 20, sha256: String(repeating: "f", count: 64), mode: 0o4644,
                    mtime: Int64.max / 3)
            }
        }
        var manifest = Manifest(
            format: Manifest.currentFormat, tool: "storebackup", toolVersion: "0.1.0", hostName: "host \"x\"", sourcePath: "/srv/é",
            createdAt: Date(timeIntervalSince1970: 1_764_196_000), compressionLevel: 1, rootMode: 0o750, rootMtime: 1_600_000_001,
            files: files,
            databases: [.init(path: "App.sqlite", pageSize: 4096, pageCount: 77, journalMode: "wal", snapshotMethod: "read-transaction")])
        manifest.outsideLinks = ["shared-config"]
        manifest.leftOut = ["app.sock (a socket)"]
        return manifest
    }

    private func entry(_ path: String) -> ArchiveEntry {
        ArchiveEntry(
            index: 0, path: path, kind: .file, permissions: 0o644, modificationTime: 0, size: 0, compressedSize: 0,
            compressionMethod: 0, crc: 0, encryptionMethod: 0)
    }

    func testStreamedManifestEqualsJSONDecoders() throws {
        for count in [0, 1, 7, 101] {
            var manifest = sample(fileCount: count)
            for text in [try manifest.encoded(), try manifest.encodedByFoundation()] {
                for chunk in [1, 3, 64 << 10] {
                    let (decoded, sha256) = try streamed(text, chunk: chunk)
                    XCTAssertEqual(decoded, try Manifest.decode(text), "\(count) files, chunks of \(chunk)")
                    XCTAssertEqual(sha256, FileDigest.hex(SHA256.hash(data: text)))
                }
            }
            manifest.format = 3
            manifest.kind = "incremental"
            manifest.pageMaps = [Manifest.PageMap(path: "App.sqlite", hash: "sha256-128", complete: true)]
            manifest.base = Manifest.Base(name: "b", manifestSHA256: "c", createdAt: Date(timeIntervalSince1970: 1_764_200_000))
            if count > 3 { manifest.files[3].source = "base" }
            XCTAssertEqual(try streamed(try manifest.encoded(), chunk: 5).0, manifest)
        }
    }

    /// Format 4's block hashes come out as JSONDecoder reads them, from either writer's text.
    func testBlockHashesDecodeAsJSONDecoderDecodes() throws {
        var manifest = sample(fileCount: 3)
        manifest.format = 4
        manifest.files[1].deflateBlockSize = 1 << 20
        manifest.files[1].deflateBlocks = [1000, 2000, 30]
        manifest.files[1].deflateBlockHashes = ["0a", "1b", "2c"].map { RawSHA256(hex: String(repeating: $0, count: 32))! }
        // The page deltas' rows are the header's, decoded by JSONDecoder; a second one of one block.
        manifest.pageDeltas = [
            .init(
                path: "App.sqlite", size: 2_500_000, sha256: String(repeating: "d", count: 64), deflateBlockSize: 1 << 20,
                deflateBlocks: [1, 2, 3], deflateBlockHashes: manifest.files[1].deflateBlockHashes),
            .init(path: "path/", size: 20, sha256: String(repeating: "e", count: 64)),
        ]
        for text in [try manifest.encoded(), try manifest.encodedByFoundation()] {
            XCTAssertEqual(try streamed(text, chunk: 7).0, manifest)
            XCTAssertEqual(try Manifest.decode(text), manifest)
        }
    }

    /// Format 1 wrote plain paths: they come out escaped, as JSONDecoder's path gives them.
    func testFormat1PathsAreEscaped() throws {
        var manifest = sample(fileCount: 9)
        manifest.format = 1
        let text = try manifest.encoded()
        XCTAssertEqual(try streamed(text, chunk: 4).0, try Manifest.decode(text))
    }

    /// A row whose path is the next entry's shares the entry's string; the others still match.
    func testRowsMatchingEntriesComeOutTheSame() throws {
        let manifest = sample(fileCount: 20)
        let entries = manifest.files.enumerated().filter { $0.offset % 3 != 0 }.map { entry($0.element.path) }
        XCTAssertEqual(try streamed(try manifest.encoded(), chunk: 100, entries: entries).0, manifest)
    }

    /// Rows written otherwise than storebackup writes them (escaped keys, numbers at and past
    /// their types' edges, SHA-256 and type texts of other forms, unknown keys) are read as
    /// JSONDecoder reads them: the same rows, or refused by both.
    func testRowsWrittenOtherwiseDecodeAsJSONDecoderDecodes() throws {
        let sha = String(repeating: "0123456789abcdef", count: 4)
        let rows = [
            #"{"p\u0061th":"a","\u0074ype":"file","size":1,"mode":420,"mtime":0}"#,
            #"{"path":"a\/b\u00e9","type":"fi\u006ce","size":0,"mode":0,"mtime":-1}"#,
            #"{"path":"a","type":"weird","size":1,"mode":420,"mtime":0,"extra":{"a":[1,2.5e3,null,true]}}"#,
            #"{"path":"a","type":"file","size":9223372036854775807,"mode":4294967295,"mtime":-9223372036854775808}"#,
            #"{"path":"a","type":"file","size":9223372036854775808,"mode":420,"mtime":0}"#,
            #"{"path":"a","type":"file","size":1,"mode":4294967296,"mtime":0}"#,
            #"{"path":"a","type":"file","size":1,"mode":-0,"mtime":-0}"#,
            #"{"path":"a","type":"file","size":01,"mode":420,"mtime":0}"#,
            #"{"path":"a","type":"file","size":-,"mode":420,"mtime":0}"#,
            #"{"path":"a","type":"file","size":1,"mode":420,"mtime":0,"sha256":""# + sha + #""}"#,
            #"{"path":"a","type":"file","size":1,"mode":420,"mtime":0,"sha256":""# + sha.uppercased() + #""}"#,
            #"{"path":"a","type":"file","size":1,"mode":420,"mtime":0,"sha256":""# + sha.dropLast() + #""}"#,
            #"{"path":"a","type":"file","size":1,"mode":420,"mtime":0,"sha256":null,"source":null,"linkTarget":"t"}"#,
            #"{"path":"a","type":"file","size":1,"mode":420,"mtime":0,"sha256":1}"#,
            #"{"path":"a","type":"database","size":1,"mode":420,"mtime":0,"deflateBlockSize":4,"deflateBlocks":[1,-2,3]}"#,
            #"{"path":"a","type":"database","size":1,"mode":420,"mtime":0,"deflateBlocks":[1,"2"]}"#,
        ]
        func manifest(_ row: String) -> Data {
            Data(
                (#"{"compressionLevel":1,"createdAt":"2026-11-26T00:00:00Z","databases":[],"files":["# + row + "," + row
                    + #"],"format":2,"hostName":"h","sourcePath":"/s","tool":"storebackup","toolVersion":"1"}"#).utf8)
        }
        for row in rows {
            let expected = try? Manifest.decode(manifest(row))
            for chunk in [1, 7, 1 << 16] {
                let decoded = try? streamed(manifest(row), chunk: chunk, entries: [entry("a")]).0
                XCTAssertEqual(decoded, expected, "\(row), chunks of \(chunk)")
            }
        }
        // Stricter than JSONDecoder, which reads these as integers: a size, time or mode is
        // an integer written as one (storebackup writes no other form).
        for row in [
            #"{"path":"a","type":"file","size":1e2,"mode":420,"mtime":0}"#, #"{"path":"a","type":"file","size":1.0,"mode":420,"mtime":0}"#,
        ] {
            XCTAssertNotNil(try? Manifest.decode(manifest(row)))
            XCTAssertThrowsError(try streamed(manifest(row), chunk: 3), row)
        }
    }

    func testTextJSONDecoderRefusesIsRefused() throws {
        let row = #"{"path":"a","type":"file","size":1,"mode":420,"mtime":0}"#
        func manifest(_ files: String, format: String = "2") -> Data {
            Data(
                (#"{"compressionLevel":1,"createdAt":"2026-11-26T00:00:00Z","databases":[],"files":"# + files
                    + #","format":"# + format + #","hostName":"h","sourcePath":"/s","tool":"storebackup","toolVersion":"1"}"#).utf8)
        }
        XCTAssertNoThrow(try streamed(manifest("[" + row + "]"), chunk: 2))
        let refused: [Data] = [
            Data("{not json".utf8), manifest("[" + row + "]") + Data(" x".utf8), manifest("[" + row + ",]"),
            manifest(#"[{"path":"a","type":"file","size":1,"mode":420}]"#),  // no mtime
            manifest(#"[{"path":"a","type":"file","size":"1","mode":420,"mtime":0}]"#),  // size as text
            manifest(#"[{"path":"a","type":"file","size":1.5,"mode":420,"mtime":0}]"#),
            manifest(#"[{"path":"a","type":"file","size":1,"mode":-1,"mtime":0}]"#),  // mode below UInt32
            manifest(#"[{"path":"a","path":"b","type":"file","size":1,"mode":420,"mtime":0}]"#),
            manifest(#"[{"path":"a\ud800","type":"file","size":1,"mode":420,"mtime":0}]"#),
            Data(#"{"files":[]}"#.utf8),  // no header fields
            manifest(#"{"rows":[]}"#),  // files not a list
            Data(manifest("[" + row + "]").dropLast()),
        ]
        for text in refused {
            XCTAssertThrowsError(try streamed(text, chunk: 3), String(decoding: text, as: UTF8.self)) { error in
                guard case ManifestStreamDecoder.Failure.unreadable = error else { return XCTFail("\(error)") }
            }
        }
        // Bytes that are not UTF-8 inside a string.
        var invalid = manifest("[" + row + "]")
        invalid[invalid.firstIndex(of: UInt8(ascii: "h"))!] = 0xFF
        XCTAssertThrowsError(try streamed(invalid, chunk: 3))
        // A newer format is told apart from damage, although its rows come before the format field.
        for files in [#"[{"path":1}]"#, #"{"layout":"different"}"#] {
            let newer = Manifest.newestReadableFormat + 1
            XCTAssertThrowsError(try streamed(manifest(files, format: "\(newer)"), chunk: 3)) { error in
                guard case ManifestStreamDecoder.Failure.newer(newer) = error else { return XCTFail("\(error)") }
            }
        }
        // More rows than allowed: refused as they come.
        let many = manifest("[" + Array(repeating: row, count: 11).joined(separator: ",") + "]")
        XCTAssertThrowsError(try streamed(many, chunk: 64, maxRows: 10)) { error in
            guard case ManifestStreamDecoder.Failure.tooManyRows = error else { return XCTFail("\(error)") }
        }
    }
}
