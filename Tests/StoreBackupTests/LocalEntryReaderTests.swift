import CZip
import XCTest

@testable import StoreBackup

/// Small entries of a backup file on this machine are read without libzip
/// (``LocalEntryReader``): what it finds past each local header must be exactly what libzip
/// would give, and a damaged entry must never be handed on.
final class LocalEntryReaderTests: XCTestCase {
    private struct Made {
        let folder: String
        let path: String
        let contents: [String: [UInt8]]
    }

    /// A stored entry, deflated ones (compressible, random, empty) and one whose local header
    /// carries an extra field longer than the reader's first read.
    private func makeArchive() throws -> Made {
        let folder = try TestEnvironment.temporaryDirectory("local-entry")
        let path = folder + "/small.zip"
        var random = SplitMix64(seed: 7)
        let contents: [String: [UInt8]] = [
            "stored": Array("stored as it is, ".utf8.map { $0 }.repeated(200)),
            "deflated": Array("a line that deflates well\n".utf8.map { $0 }.repeated(900)),
            "random": (0..<30_000).map { _ in UInt8(truncatingIfNeeded: random.next()) },
            "empty": [],
            "long-extra": Array("behind a long local extra field".utf8),
        ]
        var error: Int32 = 0
        let archive = try XCTUnwrap(zip_open(path, ZIP_CREATE | ZIP_EXCL, &error), "libzip error \(error)")
        for name in contents.keys.sorted() {
            let bytes = contents[name]!
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            copy.copyMemory(from: bytes, byteCount: bytes.count)
            let source = try XCTUnwrap(zip_source_buffer(archive, copy, zip_uint64_t(bytes.count), 1))
            let index = zip_file_add(archive, name, source, zip_flags_t(ZIP_FL_ENC_UTF_8))
            XCTAssertGreaterThanOrEqual(index, 0)
            if name == "stored" { zip_set_file_compression(archive, zip_uint64_t(index), ZIP_CM_STORE, 0) }
            if name == "long-extra" {
                let extra = [UInt8](repeating: 0x5A, count: 1_000)
                XCTAssertEqual(
                    zip_file_extra_field_set(
                        archive, zip_uint64_t(index), 0x7A7A, UInt16(ZIP_EXTRA_FIELD_NEW), extra, UInt16(extra.count),
                        zip_flags_t(ZIP_FL_LOCAL)),
                    0)
            }
        }
        XCTAssertEqual(zip_close(archive), 0)
        return Made(folder: folder, path: path, contents: contents)
    }

    func testEveryKindOfSmallEntryReadsBackExactly() throws {
        let made = try makeArchive()
        defer { try? FileManager.default.removeItem(atPath: made.folder) }
        let reader = try ArchiveReader(path: made.path, backupName: "small.zip")
        let local = LocalEntryReader(file: try XCTUnwrap(reader.localFile), backupName: "small.zip")
        let buffers = EntryReadBuffers(capacity: 64 << 10)
        XCTAssertEqual(Set(reader.entries.map(\.path)), Set(made.contents.keys))
        XCTAssert(reader.entries.contains { $0.compressionMethod == Int32(ZIP_CM_STORE) && $0.size > 0 }, "one entry is stored")
        XCTAssert(reader.entries.contains { $0.compressionMethod == Int32(ZIP_CM_DEFLATE) }, "the others are deflated")
        for entry in reader.entries {
            XCTAssert(LocalEntryReader.canRead(entry, into: buffers), entry.path)
            let bytes = try XCTUnwrap(local.read(entry, centralNameLength: reader.centralNameLength(of: entry), into: buffers), entry.path)
            XCTAssert(bytes.elementsEqual(made.contents[entry.path]!), "\(entry.path) comes back byte for byte")
        }
        // The long extra field is really in the local header, beyond the first read.
        let long = try XCTUnwrap(reader.entries.first { $0.path == "long-extra" })
        let file = try XCTUnwrap(FileHandle(forReadingAtPath: made.path))
        try file.seek(toOffset: UInt64(long.archiveOffset) + 28)
        let extraLength = try XCTUnwrap(file.readData(ofLength: 2))
        try file.close()
        XCTAssertGreaterThan(Int(extraLength[0]) | Int(extraLength[1]) << 8, LocalEntryReader.headerSlack)
        // Too large for the buffers: left to libzip.
        let random = try XCTUnwrap(reader.entries.first { $0.path == "random" })
        XCTAssertFalse(LocalEntryReader.canRead(random, into: EntryReadBuffers(capacity: 16 << 10)))
    }

    func testADamagedEntryIsNotHandedOn() throws {
        let made = try makeArchive()
        defer { try? FileManager.default.removeItem(atPath: made.folder) }
        for name in ["stored", "deflated"] {
            let pristine = try ArchiveReader(path: made.path, backupName: "small.zip")
            let entry = try XCTUnwrap(pristine.entries.first { $0.path == name })
            // One byte in the middle of the entry's data.
            let dataOffset = try LocalHeader.dataOffset(
                of: entry, in: try XCTUnwrap(pristine.localFile), centralNameLength: name.utf8.count, backupName: "small.zip")
            let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: made.path))
            let at = UInt64(dataOffset) + UInt64(entry.compressedSize) / 2
            try handle.seek(toOffset: at)
            let original = try XCTUnwrap(handle.readData(ofLength: 1).first)
            try handle.seek(toOffset: at)
            handle.write(Data([original ^ 0x20]))
            try handle.close()
            defer {
                if let handle = FileHandle(forUpdatingAtPath: made.path) {
                    try? handle.seek(toOffset: at)
                    handle.write(Data([original]))
                    try? handle.close()
                }
            }
            let reader = try ArchiveReader(path: made.path, backupName: "small.zip")
            let local = LocalEntryReader(file: try XCTUnwrap(reader.localFile), backupName: "small.zip")
            let damaged = try XCTUnwrap(reader.entries.first { $0.path == name })
            // Left to libzip, which names the damage.
            XCTAssertNil(
                try local.read(
                    damaged, centralNameLength: reader.centralNameLength(of: damaged), into: EntryReadBuffers(capacity: 64 << 10)), name)
        }
    }
}

extension Array {
    fileprivate func repeated(_ times: Int) -> [Element] { Array((0..<times).map { _ in self }.joined()) }
}
