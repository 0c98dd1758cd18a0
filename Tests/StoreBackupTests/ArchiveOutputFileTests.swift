import CZip
import XCTest

@testable import StoreBackup

/// libzip writes new archives through ``ArchiveOutputFile``: its buffered writes and its
/// seeks back to rewrite local headers (inside the buffer, and behind it in the file) must
/// leave an archive that libzip's strictest reading accepts with every byte in place.
final class ArchiveOutputFileTests: XCTestCase {
    func testArchiveWrittenThroughTheBufferReadsBackExactly() throws {
        let folder = try TestEnvironment.temporaryDirectory("output-file")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/new.zip"
        var random = SplitMix64(seed: 34)
        // Larger than the buffer (its header is rewritten in the file), around its size, and
        // many small ones (rewritten inside the buffer, across its end now and then).
        var sizes = [3 << 20, (1 << 20) - 17, 1 << 20, 0]
        for _ in 0..<300 { sizes.append(Int(random.next() % 40_000)) }
        let contents = sizes.map { size in (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next() % 7) } }

        let output = try ArchiveOutputFile(path: path)
        var reported = 0
        output.wroteToFile = { reported += $0 }
        let archive = try output.openHandle()
        for (number, bytes) in contents.enumerated() {
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            copy.copyMemory(from: bytes, byteCount: bytes.count)
            // freep 1: libzip frees the copy with the source.
            let source = try XCTUnwrap(zip_source_buffer(archive, copy, zip_uint64_t(bytes.count), 1))
            XCTAssertGreaterThanOrEqual(zip_file_add(archive, "entry-\(number)", source, zip_flags_t(ZIP_FL_ENC_UTF_8)), 0)
        }
        XCTAssertEqual(zip_close(archive), 0, String(cString: zip_strerror(archive)))

        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        XCTAssertGreaterThanOrEqual(reported, size, "every byte of the file is reported as written")
        var error: Int32 = 0
        let reader = try XCTUnwrap(zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &error), "libzip error \(error)")
        defer { zip_discard(reader) }
        XCTAssertEqual(zip_get_num_entries(reader, 0), Int64(contents.count))
        for (number, bytes) in contents.enumerated() {
            let file = try XCTUnwrap(zip_fopen(reader, "entry-\(number)", 0))
            var read = [UInt8](repeating: 0, count: bytes.count + 1)
            let got = read.withUnsafeMutableBytes { zip_fread(file, $0.baseAddress, zip_uint64_t($0.count)) }
            zip_fclose(file)
            XCTAssertEqual(got, Int64(bytes.count), "entry \(number)")
            XCTAssert(read.prefix(bytes.count).elementsEqual(bytes), "entry \(number) comes back byte for byte")
        }
    }

    func testAnExistingFileIsRefusedAndLeftAlone() throws {
        let folder = try TestEnvironment.temporaryDirectory("output-exists")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/taken.zip"
        try Data("someone else's".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try ArchiveOutputFile(path: path)) { error in
            XCTAssert("\(error)".contains("taken.zip"), "the refusal names the file: \(error)")
        }
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), "someone else's")
    }
}
