import CZip
import XCTest

@testable import StoreBackup

/// An unencrypted backup file on this machine is listed from its central directory without
/// libzip (``ArchiveReader``): the list, the manifest and every entry's fields must be
/// exactly what libzip's listing makes of the same archive.
final class CentralDirectoryListingTests: XCTestCase {
    func testEveryGoldenArchiveListsAsLibzipListsIt() throws {
        let archives = try GoldenArchiveTests.goldenArchives().filter { $0.password == nil }
        XCTAssertGreaterThanOrEqual(archives.count, 8)
        for golden in archives {
            try assertSameListing(golden.folder + "/" + golden.archiveName, golden.label)
        }
    }

    /// More entries than the directory's read window holds (the records cross its edges),
    /// names of every length and some outside ASCII, DOS times only (no extra fields).
    func testAManyEntryArchiveListsAsLibzipListsIt() throws {
        let folder = try TestEnvironment.temporaryDirectory("cd-listing")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/many.zip"
        var random = SplitMix64(seed: 11)
        var error: Int32 = 0
        let archive = try XCTUnwrap(zip_open(path, ZIP_CREATE | ZIP_EXCL, &error), "libzip error \(error)")
        for number in 0..<12_000 {
            let length = Int(random.next() % 180)
            var name = "dir-\(number % 7)/" + String(repeating: "n", count: length) + "-\(number)"
            if number % 5 == 0 { name += "-é" }
            let bytes = (0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            copy.copyMemory(from: bytes, byteCount: bytes.count)
            let source = try XCTUnwrap(zip_source_buffer(archive, copy, zip_uint64_t(bytes.count), 1))
            let index = zip_file_add(archive, name, source, zip_flags_t(ZIP_FL_ENC_UTF_8))
            XCTAssertGreaterThanOrEqual(index, 0)
            zip_file_set_mtime(archive, zip_uint64_t(index), time_t(946_684_800 + number * 7_919), 0)
            if number % 3 == 0 {
                zip_file_set_external_attributes(archive, zip_uint64_t(index), 0, UInt8(ZIP_OPSYS_UNIX), (0o100_640 as UInt32) << 16)
            }
        }
        XCTAssertEqual(zip_close(archive), 0)
        let size = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        XCTAssertGreaterThan(size, 2 << 20, "the central directory spans several read windows")
        try assertSameListing(path, "many.zip")
    }

    private func assertSameListing(_ path: String, _ label: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let direct = try ArchiveReader(path: path, backupName: label)
        let libzip = try ArchiveReader(path: path, backupName: label, listsThroughLibzip: true)
        XCTAssertFalse(direct.centralNameLengths.isEmpty, "\(label) is listed without libzip", file: file, line: line)
        XCTAssert(libzip.centralNameLengths.isEmpty, "\(label) is listed through libzip", file: file, line: line)
        XCTAssertEqual(direct.entries.count, libzip.entries.count, label, file: file, line: line)
        for (mine, theirs) in zip(direct.entries, libzip.entries) {
            XCTAssertEqual(describe(mine), describe(theirs), label, file: file, line: line)
        }
        XCTAssertEqual(direct.manifest, libzip.manifest, label, file: file, line: line)
        XCTAssertEqual(direct.manifestSHA256, libzip.manifestSHA256, label, file: file, line: line)
        XCTAssertEqual(direct.markerFormat, libzip.markerFormat, label, file: file, line: line)
        XCTAssertEqual(Set(direct.pageDeltas.keys), Set(libzip.pageDeltas.keys), label, file: file, line: line)
    }

    private func describe(_ entry: ArchiveEntry) -> String {
        "\(entry.index) \(entry.path) \(entry.kind) \(String(entry.permissions, radix: 8)) \(entry.modificationTime) "
            + "\(entry.size) \(entry.compressedSize) \(entry.compressionMethod) \(entry.crc) \(entry.encryptionMethod) "
            + "\(entry.archiveOffset)"
    }
}
