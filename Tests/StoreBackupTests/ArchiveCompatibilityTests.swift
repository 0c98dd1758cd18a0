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
        let result = try run("/usr/bin/env", ["unzip", "-t", archive])
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
        let result = try run("/usr/bin/env", ["python3", "-c", script, archive])
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
        let restored = try runStoreBackup(["restore", "latest", work + "/TZRestored", "--from", work + "/tz", "--yes"],
                                          environment: ["TZ": "Asia/Tokyo"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let info = try FileSystem.lstatInfo(work + "/TZRestored/notes.txt")
        XCTAssertEqual(info.st_mtim.tv_sec, 1_600_000_001)
    }

    private func run(_ executable: String, _ arguments: [String]) throws -> CommandResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return CommandResult(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                             stderr: String(decoding: errData, as: UTF8.self))
    }
}

func sha256Hex(_ text: String) -> String {
    var hasher = Crypto.SHA256()
    hasher.update(data: Data(text.utf8))
    return hasher.finalize().map { String(format: "%02x", $0) }.joined()
}
