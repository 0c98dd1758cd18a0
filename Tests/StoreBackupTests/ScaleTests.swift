import Foundation
import XCTest

@testable import StoreBackup

/// Issue 34: stores of many small files. No cap on entries below the format's, and memory
/// per entry small enough that a store of hundreds of thousands of files restores on a
/// modest machine.
///
/// The round trip uses 60,000 files, above the old 50,000-entry limit (STOREBACKUP_SCALE_FILES
/// sets another count); STOREBACKUP_SCALE_TESTS=1 runs the memory test on 200,000 entries instead of 20,000.
/// A store of 66,000 tiny files crosses ZIP64's 65,535-entry line, checked by Python's zipfile too.
final class ScaleTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("scale")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// A store of many files is created, verified and restored, and the restored tree
    /// matches the original by an independent walk (type, mode, mtime, SHA-256 of each file).
    func testManySmallFilesRoundTrip() throws {
        // At least 1,000 files: fewer would not test a store of many.
        let count = try TestEnvironment.count("STOREBACKUP_SCALE_FILES", default: 60_000, floor: 1_000)
        try makeStore(smallFiles: count, sizes: 200...2_000)

        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        let verified = try runStoreBackup(["verify", "latest", "--from", backups])
        XCTAssertEqual(verified.status, 0, verified.stderr)
        let restored = try runStoreBackup(["restore", "latest", work + "/Restored", "--from", backups, "--yes"])
        XCTAssertEqual(restored.status, 0, restored.stderr)

        let original = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let copy = try StoreFixture.describe(work + "/Restored", includeJournals: false, includeDatabaseContent: false)
        XCTAssertGreaterThan(original.count, count)
        XCTAssertEqual(original.count, copy.count)
        let differing = original.filter { copy[$0.key] != $0.value }.map(\.key).sorted()
        XCTAssertEqual(differing, [], "restored differently: \(differing.prefix(5))")
        XCTAssertEqual(try StoreFixture.query(work + "/Restored/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    /// Past ZIP64's entry line (65,535 in the classic end of central directory): a store of
    /// 66,000 tiny files is backed up, and an independent reader (Python's zipfile, not
    /// libzip) tests every entry's CRC, finds the ZIP64 end records with the classic count
    /// saturated at 0xFFFF, and lists exactly the store's paths (plus the archive's own
    /// `.storebackup/` entries); the restore is exact. The round trip above stays below
    /// the line by default, so without this test no ZIP64 archive of that kind is read.
    func testMoreEntriesThanClassicZIPHoldsUseZIP64AndRestore() throws {
        let count = 66_000
        try makeStore(smallFiles: count, sizes: 1...8)
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        let archive = backups + "/" + created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        let script = """
            import json, struct, sys, zipfile
            path = sys.argv[1]
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
                names = z.namelist()
            with open(path, "rb") as f:
                f.seek(-(22 + 20), 2)
                tail = f.read()
                locator, classic = tail[:20], tail[20:]
                assert struct.unpack("<I", classic[:4])[0] == 0x06054B50, "no end of central directory at the end (a comment?)"
                assert struct.unpack("<I", locator[:4])[0] == 0x07064B50, "no ZIP64 end of central directory locator"
                f.seek(struct.unpack("<Q", locator[8:16])[0])
                record = f.read(56)
                assert struct.unpack("<I", record[:4])[0] == 0x06064B50, "the locator does not lead to a ZIP64 end record"
            print(json.dumps({"bad": bad, "names": names, "classic": struct.unpack("<H", classic[10:12])[0],
                              "zip64": struct.unpack("<Q", record[32:40])[0]}))
            """
        let read = try runTool("/usr/bin/env", ["python3", "-c", script, archive])
        XCTAssertEqual(read.status, 0, read.stderr)
        let facts = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: Any])
        XCTAssertTrue(facts["bad"] is NSNull, "zipfile found a bad entry: \(facts["bad"] ?? "")")
        let names = try XCTUnwrap(facts["names"] as? [String])
        XCTAssertGreaterThan(names.count, 65_535)
        XCTAssertEqual(facts["zip64"] as? Int, names.count, "the ZIP64 end record counts every entry")
        XCTAssertEqual(facts["classic"] as? Int, 0xFFFF, "the classic count says: see the ZIP64 record")
        let original = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let stored = Set(names.filter { !$0.hasPrefix(".storebackup/") }.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 })
        XCTAssertEqual(stored.count, names.count - names.filter { $0.hasPrefix(".storebackup/") }.count, "no name twice")
        let foreign = stored.subtracting(original.keys).sorted()
        let missing = Set(original.keys).subtracting(stored).sorted()
        XCTAssertEqual(foreign.count, 0, "entries that are not the store's: \(foreign.prefix(5))")
        XCTAssertEqual(missing.count, 0, "paths of the store not in the archive: \(missing.prefix(5))")

        let restored = try runStoreBackup(["restore", "latest", work + "/Restored", "--from", backups, "--yes"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let copy = try StoreFixture.describe(work + "/Restored", includeJournals: false, includeDatabaseContent: false)
        XCTAssertEqual(copy.count, original.count)
        let differing = original.filter { copy[$0.key] != $0.value }.map(\.key).sorted()
        XCTAssertEqual(differing.count, 0, "restored differently: \(differing.prefix(5))")
        XCTAssertEqual(try StoreFixture.query(work + "/Restored/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    /// Create, restore and verify stay within a fixed base plus a bound per entry
    /// (docs/dev/scale.md): 20,000 entries by default, 200,000 with STOREBACKUP_SCALE_TESTS=1
    /// (several minutes). Never skipped: the suite counts a skip as a failure.
    func testEntriesStayWithinTheirMemoryBound() throws {
        let count = ProcessInfo.processInfo.environment["STOREBACKUP_SCALE_TESTS"] == "1" ? 200_000 : 20_000
        try makeStore(smallFiles: count, sizes: 16...256)
        let createRSS = try peakRSSKiBOfStoreBackup(["create", store, "--to", backups])
        let createBoundKiB = Self.createBaseKiB + count * Self.createBytesPerEntry / 1024
        print("\(count) entries: peak RSS create \(createRSS) KiB (bound \(createBoundKiB) KiB)")
        XCTAssertLessThanOrEqual(createRSS, createBoundKiB, "create peak RSS")
        try FileManager.default.removeItem(atPath: store)

        let boundKiB = Self.baseKiB + count * Self.bytesPerEntry / 1024
        let verifyRSS = try peakRSSKiBOfStoreBackup(["verify", "latest", "--from", backups])
        let restoreRSS = try peakRSSKiBOfStoreBackup(["restore", "latest", work + "/Restored", "--from", backups, "--yes"])
        print("\(count) entries: peak RSS verify \(verifyRSS) KiB, restore \(restoreRSS) KiB (bound \(boundKiB) KiB)")
        XCTAssertLessThanOrEqual(verifyRSS, boundKiB, "verify peak RSS")
        XCTAssertLessThanOrEqual(restoreRSS, boundKiB, "restore peak RSS")
        let files = try FileManager.default.contentsOfDirectory(atPath: work + "/Restored/.App_SUPPORT/_EXTERNAL_DATA")
        XCTAssertEqual(files.count, count)
    }

    /// Memory of a restore or verify that does not grow with the entry count.
    static let baseKiB = 47 * 1024
    /// Memory per entry allowed on top (docs/dev/scale.md gives the measured figures; the debug
    /// build here measured 59.2 / 59.1 MiB for verify / restore at 20,000 entries).
    static let bytesPerEntry = 896
    /// The same for create, whose base also holds its block buffers (measured figures in
    /// docs/dev/scale.md; the debug build here measured 50.6 MiB at 20,000 entries, and 59.8 MiB
    /// when libzip held every entry until the end, which this bound refuses).
    static let createBaseKiB = 48 * 1024
    static let createBytesPerEntry = 560

    /// The fixture store plus `smallFiles` UUID-named files of seeded sizes and contents
    /// under .App_SUPPORT/_EXTERNAL_DATA, as an app that keeps attributes as files.
    private func makeStore(smallFiles: Int, sizes: ClosedRange<Int>) throws {
        try StoreFixture.make(at: store, logRows: 200, blobCount: 0)
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        var random = SplitMix64(seed: 34)
        let folder = store + "/.App_SUPPORT/_EXTERNAL_DATA/"
        var bytes = [UInt8](repeating: 0, count: sizes.upperBound)
        for _ in 0..<smallFiles {
            let name = UUID(uuid: withUnsafeBytes(of: (random.next(), random.next())) { $0.load(as: uuid_t.self) }).uuidString
            let size = Int.random(in: sizes, using: &random)
            for offset in stride(from: 0, to: size, by: 8) {
                withUnsafeBytes(of: random.next()) { word in
                    for index in 0..<min(8, size - offset) { bytes[offset + index] = word[index] }
                }
            }
            let fd = open(folder + name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw StoreBackupError.io(path: folder + name, operation: "create", errno: errno) }
            defer { close(fd) }
            guard write(fd, bytes, size) == size else { throw StoreBackupError.io(path: folder + name, operation: "write", errno: errno) }
        }
    }
}
