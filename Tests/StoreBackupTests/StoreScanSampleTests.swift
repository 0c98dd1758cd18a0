import Foundation
import XCTest

@testable import StoreBackup

/// The scan inspects a large folder on every core and takes create's compressibility sample
/// with the same open as the SQLite header: the result must be what the one-thread scan and
/// the separate sample gave.
final class StoreScanSampleTests: XCTestCase {
    private func write(_ bytes: [UInt8], to path: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    private func randomBytes(_ count: Int, _ random: inout SplitMix64) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    private func textBytes(_ count: Int) -> [UInt8] {
        Array(String(repeating: "the quick brown fox jumps over the lazy dog ", count: count / 44 + 1).utf8.prefix(count))
    }

    /// Files of every kind the sample distinguishes, in a folder large enough for several threads.
    private func makeStore() throws -> String {
        let root = try TestEnvironment.temporaryDirectory("scan-sample")
        let blobs = root + "/blobs"
        try FileManager.default.createDirectory(atPath: blobs, withIntermediateDirectories: true)
        var random = SplitMix64(seed: 34)
        let count = StoreScanner.namesPerInspectingThread * 2 + 37
        for index in 0..<count {
            let name = String(format: "%05d", index)
            switch index % 5 {
            case 0: try write(randomBytes(4096 + index % 9000, &random), to: "\(blobs)/\(name)")
            case 1: try write(textBytes(4096 + index % 9000), to: "\(blobs)/\(name)")
            case 2: try write(randomBytes(600 + index % 3000, &random), to: "\(blobs)/\(name)")
            case 3: try write(randomBytes(index % 400, &random), to: "\(blobs)/\(name)")
            default: try write([UInt8](repeating: 0, count: 4096), to: "\(blobs)/\(name)")
            }
        }
        // A database inside the large folder, its companion left out, and a file whose name
        // looks like a companion of something that is not a database.
        let database = try SQLiteConnection(path: blobs + "/01000-db", mode: .create)
        try database.execute("CREATE TABLE t(x); INSERT INTO t VALUES(randomblob(20000));", operation: "fill")
        database.close()
        try write(randomBytes(9000, &random), to: blobs + "/01000-db-wal")
        try write(randomBytes(9000, &random), to: blobs + "/00005-wal")
        return root
    }

    /// SQLite writes whole pages (multiples of 512 bytes), so the scan opens through
    /// SQLite's VFS only files of such sizes: a file with a database's header and a size
    /// that is not a whole number of pages is archived as a plain file.
    func testOnlyWholePagesAreTakenForADatabase() throws {
        let root = try TestEnvironment.temporaryDirectory("scan-pages")
        defer { try? FileManager.default.removeItem(atPath: root) }
        for name in ["whole", "torn"] {
            let database = try SQLiteConnection(path: "\(root)/\(name)", mode: .create)
            try database.execute("CREATE TABLE t(x); INSERT INTO t VALUES(randomblob(5000));", operation: "fill")
            database.close()
        }
        let torn = try FileHandle(forWritingTo: URL(fileURLWithPath: root + "/torn"))
        try torn.seekToEnd()
        try torn.write(contentsOf: Data(repeating: 7, count: 100))
        try torn.close()
        XCTAssertTrue(SQLiteHeader.isDatabase(path: root + "/torn"), "the header is still SQLite's")

        let scanned = try StoreScanner.scan(storesDirectory: root, sampleCompressibility: true)
        XCTAssertEqual(scanned.items.first { $0.relativePath == "whole" }?.kind, .database)
        XCTAssertEqual(scanned.items.first { $0.relativePath == "torn" }?.kind, .file)
    }

    func testScanSamplesAsTheSeparateSampleDoes() throws {
        let root = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let sampled = try StoreScanner.scan(storesDirectory: root, sampleCompressibility: true)
        let plain = try StoreScanner.scan(storesDirectory: root)

        XCTAssertEqual(sampled.items.map(\.relativePath), plain.items.map(\.relativePath))
        XCTAssertEqual(sampled.items.map(\.kind), plain.items.map(\.kind))
        XCTAssertEqual(sampled.items.map(\.relativePath), sampled.items.map(\.relativePath).sorted())
        XCTAssertFalse(sampled.items.contains { $0.relativePath == "blobs/01000-db-wal" }, "a database's companion is left out")
        XCTAssertEqual(sampled.items.first { $0.relativePath == "blobs/01000-db" }?.kind, .database)
        XCTAssertTrue(plain.items.allSatisfy { $0.looksIncompressible == nil })

        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: CompressibilitySample.size, alignment: 16)
        defer { buffer.deallocate() }
        var verdicts = [true: 0, false: 0]
        for item in sampled.items where item.kind == .file {
            let separate = CompressibilitySample.looksIncompressible(path: item.absolutePath, size: item.size, sample: buffer)
            if item.size < CompressibilitySample.minimumFileSize || item.relativePath.hasSuffix("-wal") {
                XCTAssertNil(item.looksIncompressible, item.relativePath)
            } else {
                XCTAssertEqual(item.looksIncompressible, separate, item.relativePath)
                verdicts[separate, default: 0] += 1
            }
        }
        XCTAssertGreaterThan(verdicts[true]!, 100, "random blobs look incompressible")
        XCTAssertGreaterThan(verdicts[false]!, 100, "text and zeros do not")

        let files = sampled.items.filter { $0.kind == .file }
        XCTAssertEqual(
            IncompressibleSample.incompressiblePaths(files, width: 2),
            IncompressibleSample.incompressiblePaths(plain.items.filter { $0.kind == .file }, width: 2))
        XCTAssertTrue(IncompressibleSample.incompressiblePaths(files, width: 2).contains("blobs/00005-wal"))
    }

    func testEntropyOfKnownSamples() {
        func entropy(_ bytes: [UInt8]) -> Double { bytes.withUnsafeBytes { CompressibilitySample.entropy($0) } }
        XCTAssertEqual(entropy([UInt8](repeating: 7, count: 8191)), 0)
        XCTAssertEqual(entropy((0..<8192).map { UInt8(truncatingIfNeeded: $0) }), 8, accuracy: 1e-12)
        XCTAssertEqual(entropy((0..<4099).map { UInt8($0 % 2) }), 1, accuracy: 1e-3)
        XCTAssertEqual(entropy([1, 2, 3]), log2(3), accuracy: 1e-12)
    }
}
