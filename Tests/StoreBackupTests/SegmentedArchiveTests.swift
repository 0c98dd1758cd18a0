import CZip
import Foundation
import XCTest

@testable import StoreBackup

/// `create` hands libzip a few thousand entries at a time (``SegmentedArchive``) and joins
/// the segments into one archive. The joined archive must be the archive libzip writes
/// when it is given every entry at once, byte for byte; and a record whose entry lies past
/// 4 GiB must carry its offset in a ZIP64 field that libzip and our own listing read.
final class SegmentedArchiveTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("segments")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testSegmentsJoinIntoTheArchiveLibzipWritesWhole() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 300, blobCount: 9)
        mkfifo(store + "/pipe", 0o640)
        // The first snapshot's connection checkpoints the fixture's WAL as it closes: after it,
        // every write finds the same store (and ``writeArchive`` the same times).
        _ = try writeArchive(of: store, entriesPerSegment: 1_000_000, name: "first.zip")
        let whole = try writeArchive(of: store, entriesPerSegment: 1_000_000, name: "whole.zip")
        let wholeBytes = try Data(contentsOf: URL(fileURLWithPath: whole))
        var entries = 0
        try withLibzip(whole) { entries = Int(zip_get_num_entries($0, 0)) }
        XCTAssertGreaterThan(entries, 20)
        for perSegment in [1, 2, 7, entries - 3, entries - 2] {
            let joined = try writeArchive(of: store, entriesPerSegment: perSegment, name: "joined-\(perSegment).zip")
            let joinedBytes = try Data(contentsOf: URL(fileURLWithPath: joined))
            XCTAssertEqual(joinedBytes.count, wholeBytes.count, "\(perSegment) entries per segment")
            XCTAssert(joinedBytes == wholeBytes, "\(perSegment) entries per segment: the same bytes as libzip's whole archive")
            try withLibzip(joined) { XCTAssertEqual(Int(zip_get_num_entries($0, 0)), entries) }
        }
    }

    func testAnEncryptedArchiveJoinsWithItsCommentAndPassword() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 4)
        let password = try BackupPassword("correct horse battery staple")
        let path = try writeArchive(of: store, entriesPerSegment: 3, name: "encrypted.zip", password: password)
        try withLibzip(path) { archive in
            var length: Int32 = 0
            let comment = try XCTUnwrap(zip_get_archive_comment(archive, &length, 0))
            XCTAssertEqual(String(cString: comment), ArchiveWriter.encryptedComment)
            let manifest = try XCTUnwrap(
                zip_fopen_encrypted(archive, Manifest.archivePath, 0, "correct horse battery staple"),
                String(cString: zip_strerror(archive)))
            var head = [UInt8](repeating: 0, count: 1)
            XCTAssertEqual(zip_fread(manifest, &head, 1), 1)
            XCTAssertEqual(head, Array("{".utf8), "the manifest decrypts")
            zip_fclose(manifest)
        }
    }

    func testARecordMovedPast4GiBCarriesItsOffsetInZIP64() throws {
        // A small archive written by libzip, its entries then placed 5 GiB into a sparse file
        // and its central directory moved there: what a segment past 4 GiB becomes.
        let small = work + "/small.zip"
        let output = try ArchiveOutputFile(path: small)
        let archive = try output.openHandle()
        let contents = (0..<5).map { Array("entry \($0) ".utf8) + [UInt8](repeating: UInt8($0), count: 3_000 * $0) }
        for (number, bytes) in contents.enumerated() {
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            copy.copyMemory(from: bytes, byteCount: bytes.count)
            let source = try XCTUnwrap(zip_source_buffer(archive, copy, zip_uint64_t(bytes.count), 1))
            let index = zip_file_add(archive, "folder/entry-\(number)", source, zip_flags_t(ZIP_FL_ENC_UTF_8))
            XCTAssertGreaterThanOrEqual(index, 0)
            let field = ZipTimestamp.encode(modificationTime: 1_700_000_000)
            XCTAssertEqual(
                zip_file_extra_field_set(
                    archive, zip_uint64_t(index), ZipTimestamp.fieldID, zip_uint16_t(ZIP_EXTRA_FIELD_NEW), field, zip_uint16_t(field.count),
                    zip_flags_t(ZIP_FL_LOCAL | ZIP_FL_CENTRAL)), 0)
        }
        XCTAssertEqual(zip_close(archive), 0)
        try output.finish()
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: small)))
        let directory = try ZipEndRecords.readUncommented(length: Int64(bytes.count)) { offset, count in
            Array(bytes[Int(offset)..<Int(offset) + count])
        }
        XCTAssertEqual(directory.entries, 5)

        let base: Int64 = 5 << 30
        var moved: [UInt8] = []
        var anyZip64 = false
        var at = Int(directory.offset)
        try bytes.withUnsafeBytes { all in
            while at < Int(directory.offset + directory.size) {
                let length = try XCTUnwrap(CentralRecordRebase.recordLength(UnsafeRawBufferPointer(rebasing: all[at...])))
                anyZip64 =
                    try CentralRecordRebase.append(UnsafeRawBufferPointer(rebasing: all[at..<at + length]), movedBy: base, to: &moved)
                    || anyZip64
                at += length
            }
        }
        XCTAssertTrue(anyZip64)
        XCTAssertEqual(moved.count, Int(directory.size) + 5 * 12, "each record gains a ZIP64 field of one offset")
        let end = ZipEndRecords.make(
            .init(entries: 5, size: Int64(moved.count), offset: base + directory.offset), anyRecordZip64: true, comment: [])
        XCTAssertEqual(end.count, 22 + 56 + 20, "the ZIP64 end records come first")

        let far = work + "/far.zip"
        let fd = open(far, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let tail = Array(bytes[0..<Int(directory.offset)]) + moved + end
        XCTAssertEqual(pwrite(fd, tail, tail.count, off_t(base)), tail.count)

        try withLibzip(far) { archive in
            XCTAssertEqual(zip_get_num_entries(archive, 0), 5)
            for (number, expected) in contents.enumerated() {
                let file = try XCTUnwrap(zip_fopen(archive, "folder/entry-\(number)", 0), String(cString: zip_strerror(archive)))
                var read = [UInt8](repeating: 0, count: expected.count + 1)
                let got = read.withUnsafeMutableBytes { zip_fread(file, $0.baseAddress, zip_uint64_t($0.count)) }
                zip_fclose(file)
                XCTAssertEqual(got, Int64(expected.count))
                XCTAssert(read.prefix(expected.count).elementsEqual(expected), "entry \(number) read from past 4 GiB")
            }
        }
        var offsets: [Int64] = []
        let layout = try CentralDirectoryCheck(path: far, backupName: "far.zip").run(
            FileArchiveBytes(descriptor: fd, size: base + Int64(tail.count))
        ) { record in
            offsets.append(record.localOffset)
            XCTAssertEqual(record.extra.count, 4 + 8 + 4 + ZipTimestamp.encode(modificationTime: 0).count)
        }
        XCTAssertEqual(layout.directoryOffset, base + directory.offset)
        XCTAssertEqual(offsets.first, base)
        XCTAssert(offsets.allSatisfy { $0 >= base })
    }

    func testZIP64SizesKeepTheirPlaceBeforeTheMovedOffset() throws {
        // A record of a 6 GiB entry: both sizes in its ZIP64 field, after a WinZip AES field.
        let aes: [UInt8] = [0x01, 0x99, 7, 0, 2, 0, 0x41, 0x45, 3, 8, 0]
        let zip64: [UInt8] = [0x01, 0x00, 16, 0] + le64(6 << 30) + le64(5 << 30)
        let record = centralRecord(name: "big", extra: aes + zip64, sizes32: 0xFFFF_FFFF, offset32: 1234, versionNeeded: 45)
        var moved: [UInt8] = []
        let needs = try record.withUnsafeBytes { try CentralRecordRebase.append($0, movedBy: 1 << 32, to: &moved) }
        XCTAssertTrue(needs)
        let extraStart = 46 + 3
        let extra = Array(moved[extraStart..<moved.count])
        XCTAssertEqual(Array(extra[0..<11]), aes, "the AES field stays first")
        XCTAssertEqual(Array(extra[11..<15]), [0x01, 0x00, 24, 0])
        XCTAssertEqual(Array(extra[15..<39]), le64(6 << 30) + le64(5 << 30) + le64((1 << 32) + 1234))
        XCTAssertEqual(Array(moved[42..<46]), [0xFF, 0xFF, 0xFF, 0xFF])
        XCTAssertEqual(Int(moved[30]) | Int(moved[31]) << 8, extra.count)

        // Below 4 GiB the offset is patched in place and nothing else changes.
        let small = centralRecord(name: "a", extra: [], sizes32: 10, offset32: 100, versionNeeded: 20)
        var patched: [UInt8] = []
        let smallNeeds = try small.withUnsafeBytes { try CentralRecordRebase.append($0, movedBy: 4096, to: &patched) }
        XCTAssertFalse(smallNeeds)
        XCTAssertEqual(Array(patched[0..<42]), Array(small[0..<42]))
        XCTAssertEqual(Array(patched[42..<46]), [0x64, 0x10, 0, 0])
        XCTAssertEqual(Array(patched[46...]), Array(small[46...]))

        // An offset already in ZIP64 (a segment longer than 4 GiB) moves on inside it.
        let far = centralRecord(
            name: "b", extra: [0x01, 0x00, 8, 0] + le64(5 << 30), sizes32: 10, offset32: 0xFFFF_FFFF, versionNeeded: 45)
        var again: [UInt8] = []
        _ = try far.withUnsafeBytes { try CentralRecordRebase.append($0, movedBy: 1 << 30, to: &again) }
        XCTAssertEqual(again.count, far.count)
        XCTAssertEqual(Array(again[46 + 1 + 4..<46 + 1 + 12]), le64(6 << 30))

        XCTAssertThrowsError(try record.dropLast().withUnsafeBytes { try CentralRecordRebase.append($0, movedBy: 0, to: &moved) })
    }

    // MARK: - Helpers

    private func writeArchive(of store: String, entriesPerSegment: Int, name: String, password: BackupPassword? = nil) throws -> String {
        // The same times in every write, whichever second it starts in: opening a database
        // touches its files, and their times are in the manifest the archive compresses.
        try setTimes(under: store, to: 1_700_000_000)
        let scan = try StoreScanner.scan(storesDirectory: store, sampleCompressibility: true)
        var snapshots: [String: DatabaseSnapshot] = [:]
        defer { snapshots.values.forEach { $0.finish() } }
        for item in scan.items where item.kind == .database {
            snapshots[item.relativePath] = try DatabaseSnapshot(
                path: item.absolutePath, relativePath: item.relativePath, scratchDirectory: work)
        }
        var settings = ArchiveWriter.Settings(
            compressionLevel: 6, sourcePath: store, hostName: "segments-test", createdAt: Date(timeIntervalSince1970: 1_790_000_000),
            password: password)
        settings.entriesPerSegment = entriesPerSegment
        let path = work + "/" + name
        _ = try ArchiveWriter(settings: settings, cancel: CancellationFlag(), progress: ProgressThrottle(nil)).write(
            items: scan.items, snapshots: snapshots, leftOut: scan.leftOut, root: (scan.rootPermissions, scan.rootModificationTime),
            to: path)
        return path
    }

    /// Sets the modification (and access) time of `root` and of everything under it, links
    /// themselves rather than what they point to.
    private func setTimes(under root: String, to seconds: Int) throws {
        let paths = [root] + (FileManager.default.subpaths(atPath: root) ?? []).map { root + "/" + $0 }
        let times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        for path in paths {
            guard utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw StoreBackupError.io(path: path, operation: "utimensat", errno: errno)
            }
        }
    }

    private func withLibzip(_ path: String, _ body: (OpaquePointer) throws -> Void) throws {
        var error: Int32 = 0
        let archive = try XCTUnwrap(zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &error), "libzip refuses \(path): error \(error)")
        defer { zip_discard(archive) }
        try body(archive)
    }

    private func centralRecord(name: String, extra: [UInt8], sizes32: UInt32, offset32: UInt32, versionNeeded: UInt16) -> [UInt8] {
        var record: [UInt8] = [0x50, 0x4b, 0x01, 0x02, 63, 3] + le16(versionNeeded) + [0, 0, 8, 0] + [0, 0, 0, 0] + [1, 2, 3, 4]
        record += le32(sizes32) + le32(sizes32)
        record += le16(UInt16(name.utf8.count)) + le16(UInt16(extra.count)) + [0, 0] + [0, 0] + [0, 0] + [0, 0, 0xA4, 0x81]
        record += le32(offset32)
        return record + Array(name.utf8) + extra
    }

    private func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
    private func le32(_ v: UInt32) -> [UInt8] { le16(UInt16(v & 0xFFFF)) + le16(UInt16(v >> 16)) }
    private func le64(_ v: UInt64) -> [UInt8] { le32(UInt32(v & 0xFFFF_FFFF)) + le32(UInt32(v >> 32)) }
}
