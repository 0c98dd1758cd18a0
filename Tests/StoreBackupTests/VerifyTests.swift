import Foundation
import XCTest

@testable import StoreBackup

/// `verify` says ok for good backups and names the fault for damaged ones.
final class VerifyTests: XCTestCase {
    var work = ""
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("verify")
        try StoreFixture.make(at: work + "/Stores")
        let created = try runStoreBackup(["create", work + "/Stores", "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testGoodBackupIsOk() throws {
        let result = try runStoreBackup(["verify", "latest", "--from", backups, "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [[String: Any]]
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(rows[0]["ok"] as? Bool, true)
        XCTAssertEqual(rows[0]["databases"] as? Int, 2)
    }

    /// Verify's promise is every CRC of the archive: a byte flipped in the format marker,
    /// which no restore writes, fails the backup too.
    func testADamagedFormatMarkerFailsVerify() throws {
        let good = try onlyBackup(in: backups)
        let damaged = backups + "/2000-01-01 000001 Stores.zip"
        try FileManager.default.copyItem(atPath: good, toPath: damaged)
        // The marker of whichever format the store needed (2, or 4 with block hashes).
        try flipByte(ofEntryNamed: ".storebackup/format-", in: damaged, atFraction: 2, mask: 0x01)
        let result = try runStoreBackup(["verify", "2000-01-01 000001 Stores.zip", "--from", backups])
        XCTAssertEqual(result.status, 1, result.stdout + result.stderr)
        XCTAssertTrue(result.stdout.contains("FAILED"), result.stdout)
        XCTAssertTrue(result.stdout.contains(".storebackup/format-"), result.stdout)
        let intact = try runStoreBackup(["verify", FileSystem.lastComponent(of: good), "--from", backups])
        XCTAssertEqual(intact.status, 0, intact.stdout + intact.stderr)
    }

    /// The same for an incremental, whose page maps no restore reads either.
    func testADamagedPageMapOfAnIncrementalFailsVerify() throws {
        let chain = work + "/chain"
        for _ in 0..<2 {
            let made = try runStoreBackup(["create", work + "/Stores", "--to", chain, "--incremental"])
            XCTAssertEqual(made.status, 0, made.stderr)
        }
        let incremental = try XCTUnwrap(
            try FileManager.default.contentsOfDirectory(atPath: chain).first { $0.contains(" incremental on ") })
        try flipByte(ofEntryNamed: ".storebackup/pagemap/", in: chain + "/" + incremental, atFraction: 2, mask: 0x01)
        let result = try runStoreBackup(["verify", incremental, "--from", chain])
        XCTAssertEqual(result.status, 1, result.stdout + result.stderr)
        XCTAssertTrue(result.stdout.contains(".storebackup/pagemap/"), result.stdout)
    }

    func testEachKindOfDamageIsNamed() throws {
        let good = try onlyBackup(in: backups)
        let flipped = backups + "/2000-01-01 000001 Stores.zip"
        try FileManager.default.copyItem(atPath: good, toPath: flipped)
        try flipByte(ofEntryNamed: "App.sqlite", in: flipped, atFraction: 3, mask: 0x55)
        let truncated = backups + "/2000-01-01 000002 Stores.zip"
        try FileManager.default.copyItem(atPath: good, toPath: truncated)
        XCTAssertEqual(truncate(truncated, try FileSystem.lstatInfo(truncated).st_size - 300), 0)
        let mismatch = backups + "/2000-01-01 000003 Stores.zip"
        try runPythonScript(
            """
            import sys, zipfile
            src = zipfile.ZipFile(sys.argv[1]); dst = zipfile.ZipFile(sys.argv[2], "w")
            for info in src.infolist():
                data = src.read(info)
                if info.filename == ".secret-config": data = b"token=changed\\n"
                dst.writestr(info, data)
            dst.close()
            """, [good, mismatch])
        let corruptDatabase = backups + "/2000-01-01 000004 Stores.zip"
        try makeBackupOfCorruptDatabase(into: corruptDatabase)

        let result = try runStoreBackup(["verify", "--all", "--from", backups, "--json"])
        XCTAssertNotEqual(result.status, 0)
        let rows = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [[String: Any]]
        var byName: [String: [String: Any]] = [:]
        for row in rows { byName[row["name"] as! String] = row }
        XCTAssertEqual(byName[FileSystem.lastComponent(of: good)]?["ok"] as? Bool, true)
        func problem(_ path: String) -> String { byName[FileSystem.lastComponent(of: path)]?["problem"] as? String ?? "" }
        XCTAssertTrue(problem(flipped).contains("App.sqlite"), problem(flipped))
        XCTAssertTrue(problem(truncated).contains("damaged"), problem(truncated))
        XCTAssertTrue(problem(mismatch).contains(".secret-config") && problem(mismatch).contains("checksum"), problem(mismatch))
        XCTAssertTrue(problem(corruptDatabase).contains("integrity check"), problem(corruptDatabase))

        let plain = try runStoreBackup(["verify", "--all", "--from", backups])
        XCTAssertEqual(plain.stdout.split(separator: "\n").filter { $0.hasPrefix("FAILED") }.count, 4, plain.stdout)
        XCTAssertEqual(plain.stdout.split(separator: "\n").filter { $0.hasPrefix("ok") }.count, 1, plain.stdout)
    }

    /// A store whose database has a damaged page, backed up as it is.
    private func makeBackupOfCorruptDatabase(into archive: String) throws {
        let store = work + "/Corrupt"
        try StoreFixture.makeWithCorruptDatabase(at: store)
        let created = try runStoreBackup(["create", store, "--to", work + "/corrupt-backups"])
        XCTAssertEqual(created.status, 0, created.stderr)
        try FileManager.default.moveItem(atPath: try onlyBackup(in: work + "/corrupt-backups"), toPath: archive)
    }

    /// XORs one byte of the stored data of the entry `name` (ending in `/`: the first entry in
    /// that folder), at 1/`fraction` of its compressed size: the archive's structure stays
    /// whole, its content not.
    private func flipByte(ofEntryNamed name: String, in archive: String, atFraction fraction: Int, mask: UInt8) throws {
        try runPythonScript(
            """
            import sys, zipfile, struct
            path, name, fraction, mask = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
            infos = zipfile.ZipFile(path).infolist()
            info = next(i for i in infos if i.filename == name or (name.endswith(("/", "-")) and i.filename.startswith(name)))
            with open(path, "r+b") as f:
                f.seek(info.header_offset); h = f.read(30)
                start = info.header_offset + 30 + struct.unpack("<H", h[26:28])[0] + struct.unpack("<H", h[28:30])[0]
                f.seek(start + info.compress_size // fraction); b = f.read(1)
                f.seek(start + info.compress_size // fraction); f.write(bytes([b[0] ^ mask]))
            """, [archive, name, String(fraction), String(mask)])
    }
}
