import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance: the archive is a standard ZIP that other tools open, with hidden files,
/// Unix modes and exact times (in the extended-timestamp field) inside.
final class ArchiveCompatibilityTests: XCTestCase {
    var work = ""
    var archive = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("compat")
        try StoreFixture.make(at: work + "/Stores")
        let result = try runStoreBackup(["create", work + "/Stores", "--to", work + "/backups"])
        XCTAssertEqual(result.status, 0, result.stderr)
        archive = try onlyBackup(in: work + "/backups")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testUnzipTestsTheArchiveClean() throws {
        let result = try runTool("/usr/bin/env", ["unzip", "-t", archive])
        XCTAssertEqual(result.status, 0, result.stdout + result.stderr)
        XCTAssertTrue(result.stdout.contains("No errors detected"), result.stdout)
        XCTAssertTrue(result.stdout.contains(".App_SUPPORT/_EXTERNAL_DATA/"), result.stdout)
        XCTAssertTrue(result.stdout.contains(".secret-config"), result.stdout)
    }

    func testPythonZipfileReadsEntriesModesAndTimes() throws {
        let script = """
            import sys, zipfile, struct, stat, json
            z = zipfile.ZipFile(sys.argv[1])
            bad = z.testzip()
            out = {"bad": bad, "entries": {}}
            for info in z.infolist():
                mtime = None
                extra = info.extra
                while len(extra) >= 4:
                    header, size = struct.unpack("<HH", extra[:4])
                    if header == 0x5455 and extra[4] & 1:
                        mtime = struct.unpack("<i", extra[5:9])[0]
                    extra = extra[4 + size:]
                out["entries"][info.filename] = {"mode": info.external_attr >> 16, "mtime": mtime, "size": info.file_size}
            print(json.dumps(out))
            """
        let result = try runTool("/usr/bin/env", ["python3", "-c", script, archive])
        XCTAssertEqual(result.status, 0, result.stderr)
        let json = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        XCTAssertTrue(json["bad"] is NSNull, "python found a corrupt entry: \(String(describing: json["bad"]))")
        let entries = json["entries"] as! [String: [String: Any]]
        XCTAssertNotNil(entries[".App_SUPPORT/"])
        XCTAssertNotNil(entries["Caches/Empty/"], "empty folders are kept")
        XCTAssertNotNil(entries[Manifest.archivePath])
        XCTAssertNil(entries["App.sqlite-wal"], "WAL files are not stored: the snapshot is consistent without them")
        XCTAssertEqual(entries[".secret-config"]?["mode"] as? Int, Int(UnixMode.regular | 0o600))
        XCTAssertEqual(entries["notes.txt"]?["mtime"] as? Int, 1_600_000_001)
        XCTAssertEqual(entries["Caches/Empty/"]?["mtime"] as? Int, 1_500_000_003)
        XCTAssertEqual((entries["notes-link"]?["mode"] as? Int).map { UInt32($0) & UnixMode.typeMask }, UnixMode.symlink)
    }

    func testManifestDescribesFilesAndDatabases() throws {
        let reader = try ArchiveReader(path: archive, backupName: "test")
        let manifest = try XCTUnwrap(reader.manifest)
        XCTAssertEqual(manifest.tool, "storebackup")
        XCTAssertEqual(manifest.hostName, FileSystem.hostName)
        XCTAssertEqual(manifest.sourcePath, FileSystem.absolutePath(work + "/Stores"))
        let notes = try XCTUnwrap(manifest.files.first { $0.path == "notes.txt" })
        XCTAssertEqual(notes.sha256, sha256Hex("grocery list\n"))
        XCTAssertEqual(notes.size, 13)
        XCTAssertEqual(notes.mode, 0o644)
        XCTAssertEqual(notes.mtime, 1_600_000_001)
        let app = try XCTUnwrap(manifest.databases.first { $0.path == "App.sqlite" })
        XCTAssertEqual(app.journalMode, "wal")
        XCTAssertEqual(app.pageSize, 4096)
        let appFile = try XCTUnwrap(manifest.files.first { $0.path == "App.sqlite" })
        XCTAssertEqual(Int64(app.pageCount * app.pageSize), appFile.size)
        XCTAssertEqual(manifest.databases.first { $0.path == "Settings.sqlite" }?.journalMode, "delete")
        XCTAssertEqual(manifest.files.first { $0.path == "notes-link" }?.linkTarget, "notes.txt")
    }

    /// Times must not depend on the time zone of the machine that creates or restores.
    func testTimesSurviveDifferentTimeZones() throws {
        let created = try runStoreBackup(["create", work + "/Stores", "--to", work + "/tz"], environment: ["TZ": "America/New_York"])
        XCTAssertEqual(created.status, 0, created.stderr)
        let restored = try runStoreBackup(
            ["restore", "latest", work + "/TZRestored", "--from", work + "/tz", "--yes"],
            environment: ["TZ": "Asia/Tokyo"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let info = try FileSystem.lstatInfo(work + "/TZRestored/notes.txt")
        XCTAssertEqual(info.st_mtim.tv_sec, 1_600_000_001)
    }

    /// Files up to 128 KiB go through the pipeline's small lane, the rest in 1 MiB blocks:
    /// many more small files than that lane holds, on both sides of its bound, random and
    /// compressible, between big files, come back byte for byte, plain (zipfile, 7-Zip)
    /// and encrypted (extract, every check of a restore), with the manifest's SHA-256.
    func testFilesOnBothSidesOfTheSmallBlockLaneComeBackExactly() throws {
        let stores = work + "/Stores"
        try FileManager.default.createDirectory(atPath: stores + "/blobs", withIntermediateDirectories: true)
        var state: UInt64 = 0x1A4E
        func next() -> UInt8 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
        let small = CompressionPipeline.smallBlockSize
        let sizes = [0, 1, 4095, 4096, small - 1, small, small + 1, 3 * small, (1 << 20) + 7]
        var expected: [String: Data] = [:]
        for round in 0..<8 {
            for (index, size) in sizes.enumerated() {
                let random = (round + index) % 2 == 0
                let bytes = (0..<size).map { position in random ? next() : UInt8(ascii: "a") &+ UInt8(position % 7) }
                let name = String(format: "blobs/%02d-%02d", round, index)
                expected[name] = Data(bytes)
                try Data(bytes).write(to: URL(fileURLWithPath: stores + "/" + name))
            }
        }

        let plain = try runStoreBackup(["create", stores, "--to", work + "/lanes-plain"])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        let plainArchive = try onlyBackup(in: work + "/lanes-plain")
        let script = """
            import hashlib, json, os, sys, zipfile
            path, store = sys.argv[1], sys.argv[2]
            z = zipfile.ZipFile(path)
            manifest = {f["path"]: f for f in json.loads(z.read(".storebackup/manifest.json"))["files"]}
            checked = 0
            for name in os.listdir(store + "/blobs"):
                data = open(store + "/blobs/" + name, "rb").read()
                assert z.read("blobs/" + name) == data, name + " differs"
                assert manifest["blobs/" + name]["sha256"] == hashlib.sha256(data).hexdigest(), name + ": manifest SHA-256"
                checked += 1
            print(checked)
            """
        let read = try runTool("/usr/bin/env", ["python3", "-c", script, plainArchive, stores])
        XCTAssertEqual(read.status, 0, read.stdout + read.stderr)
        XCTAssertEqual(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines), String(expected.count))
        let sevenZip = try runTool("/usr/bin/7z", ["t", plainArchive])
        XCTAssertTrue(sevenZip.stdout.contains("Everything is Ok"), sevenZip.stdout + sevenZip.stderr)

        let passwordFile = work + "/lanes-password"
        XCTAssertTrue(
            FileManager.default.createFile(
                atPath: passwordFile, contents: Data("lanes of blocks\n".utf8),
                attributes: [.posixPermissions: 0o600]))
        let encrypted = try runStoreBackup([
            "create", stores, "--to", work + "/lanes-encrypted", "--encrypt", "--password-file", passwordFile,
        ])
        XCTAssertEqual(encrypted.status, 0, encrypted.stderr)
        let extracted = work + "/lanes-extracted"
        let extract = try runStoreBackup([
            "extract", "latest", "--into", extracted, "--from", work + "/lanes-encrypted",
            "--password-file", passwordFile,
        ])
        XCTAssertEqual(extract.status, 0, extract.stderr)
        for (name, data) in expected {
            XCTAssertEqual(FileManager.default.contents(atPath: extracted + "/" + name), data, name)
        }
    }

    /// Multi-block entries from each deflate engine (ISA-L at the fast/default level and at
    /// 3, zlib at 6): unzip, 7-Zip, Python's zipfile and libzip itself read them; each
    /// block, cut at the manifest's block sizes, inflates on its own with zlib's raw inflate
    /// (what the parallel inflater relies on); and restore (the parallel inflater) gives
    /// back the same bytes.
    func testMultiBlockEntriesFromEveryEngineAreStandardDeflate() throws {
        let stores = work + "/Stores"
        // Compressible text (seeded), and one file whose first MiB is random: deflated,
        // because the entropy sample is taken from its middle, so one block does not compress.
        var state: UInt64 = 0x5EED
        func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return state >> 33
        }
        var text = ""
        while text.utf8.count < (3 << 20) + 12345 {
            text += "row \(next() % 100000) amount \(next() % 997) note \(["milk", "bread", "eggs", "coffee"][Int(next() % 4)])\n"
        }
        try Data(text.utf8).write(to: URL(fileURLWithPath: stores + "/big.log"))
        var mixed = (0..<(1 << 20)).map { _ in UInt8(truncatingIfNeeded: next()) }
        mixed += Array(text.utf8.prefix(2 << 20))
        try Data(mixed).write(to: URL(fileURLWithPath: stores + "/mixed.bin"))

        let script = """
            import ctypes, hashlib, json, struct, sys, zipfile, zlib
            path, store = sys.argv[1], sys.argv[2]
            z = zipfile.ZipFile(path)
            assert z.testzip() is None, "zipfile: corrupt entry"
            manifest = json.loads(z.read(".storebackup/manifest.json"))
            files = {f["path"]: f for f in manifest["files"]}
            libzip = ctypes.CDLL("libzip.so.4")
            libzip.zip_open.restype = ctypes.c_void_p
            libzip.zip_fopen.restype = ctypes.c_void_p
            libzip.zip_fopen.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
            libzip.zip_fread.restype = ctypes.c_int64
            libzip.zip_fread.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
            libzip.zip_fclose.argtypes = [ctypes.c_void_p]
            libzip.zip_close.argtypes = [ctypes.c_void_p]
            error = ctypes.c_int(0)
            archive = libzip.zip_open(path.encode(), 0, ctypes.byref(error))
            assert archive, "libzip cannot open the archive"
            for name in ("big.log", "mixed.bin"):
                expected = open(store + "/" + name, "rb").read()
                info = z.getinfo(name)
                assert info.compress_type == zipfile.ZIP_DEFLATED, name + " is not deflated"
                assert z.read(name) == expected, "zipfile: " + name + " differs"
                # libzip's own (sequential) inflate and CRC check.
                handle = libzip.zip_fopen(archive, name.encode(), 0)
                assert handle, "libzip cannot open " + name
                chunks, buffer = [], ctypes.create_string_buffer(1 << 16)
                while True:
                    got = libzip.zip_fread(handle, buffer, len(buffer))
                    assert got >= 0, "libzip read error in " + name
                    if got == 0:
                        break
                    chunks.append(buffer.raw[:got])
                libzip.zip_fclose(handle)
                assert b"".join(chunks) == expected, "libzip: " + name + " differs"
                # Every block on its own, with a fresh zlib raw inflater.
                blocks = files[name]["deflateBlocks"]
                assert len(blocks) == (len(expected) + (1 << 20) - 1) >> 20, "block index"
                with open(path, "rb") as raw:
                    raw.seek(info.header_offset)
                    header = raw.read(30)
                    name_length, extra_length = struct.unpack("<HH", header[26:30])
                    raw.seek(info.header_offset + 30 + name_length + extra_length)
                    assert sum(blocks) == info.compress_size
                    joined = b""
                    for size in blocks:
                        inflater = zlib.decompressobj(-15)
                        joined += inflater.decompress(raw.read(size)) + inflater.flush()
                assert joined == expected, "blocks inflated one by one: " + name + " differs"
            libzip.zip_close(archive)
            print("ok")
            """
        // The last case compresses on one thread: the blocks and the archive must not depend on it.
        for (level, threads) in [("fast", nil), ("3", nil), ("6", nil), ("default", "1")] as [(String, String?)] {
            let backups = work + "/level-\(level)"
            let created = try runStoreBackup(
                ["create", stores, "--to", backups, "--level", level] + (threads.map { ["--threads", $0] } ?? []))
            XCTAssertEqual(created.status, 0, created.stderr)
            let path = try onlyBackup(in: backups)
            let unzip = try runTool("/usr/bin/unzip", ["-t", path])
            XCTAssertEqual(unzip.status, 0, "level \(level): " + unzip.stdout + unzip.stderr)
            XCTAssertTrue(unzip.stdout.contains("No errors detected"), unzip.stdout)
            let sevenZip = try runTool("/usr/bin/7z", ["t", path])
            XCTAssertEqual(sevenZip.status, 0, "level \(level): " + sevenZip.stdout + sevenZip.stderr)
            XCTAssertTrue(sevenZip.stdout.contains("Everything is Ok"), sevenZip.stdout)
            let python = try runTool("/usr/bin/env", ["python3", "-c", script, path, stores])
            XCTAssertEqual(python.status, 0, "level \(level): " + python.stderr)
            XCTAssertEqual(python.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "ok")

            let restoredRoot = work + "/restored-\(level)"
            let restored = try runStoreBackup(["restore", "latest", restoredRoot, "--from", backups, "--yes"])
            XCTAssertEqual(restored.status, 0, restored.stderr)
            for name in ["big.log", "mixed.bin"] {
                XCTAssertEqual(
                    FileManager.default.contents(atPath: restoredRoot + "/" + name),
                    FileManager.default.contents(atPath: stores + "/" + name), "level \(level): \(name)")
            }
        }
    }
}

func sha256Hex(_ text: String) -> String {
    var hasher = Crypto.SHA256()
    hasher.update(data: Data(text.utf8))
    return hasher.finalize().map { String(format: "%02x", $0) }.joined()
}
