import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// A database already damaged in the live store is backed up faithfully (its bytes match the
/// manifest's SHA-256) but fails `PRAGMA integrity_check`: verify calls the backup restorable
/// only with --accept-damaged-databases and fails; restore refuses it with that reason and
/// option, the live store untouched; with the option it restores the database as it was and
/// names it. A backup damaged after it was made (bytes that do not match) is never called that.
final class DamagedDatabaseTests: XCTestCase {
    var work = ""
    var backups: String { work + "/backups" }
    var backupName = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("damaged")
        let store = work + "/Damaged/Stores"
        try StoreFixture.makeWithCorruptDatabase(at: store)
        // SQLite answers a list of problems, or stops with "malformed" part way.
        XCTAssertNotEqual(
            (try? StoreFixture.query(store + "/Data.sqlite", "PRAGMA integrity_check")) ?? "malformed", "ok",
            "the fixture must be damaged in the live store")
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testVerifySaysRestorableOnlyWithTheOptionAndFails() throws {
        let plain = try runStoreBackup(["verify", backupName, "--from", backups])
        XCTAssertEqual(plain.status, 1, plain.stdout + plain.stderr)
        XCTAssertTrue(
            plain.stdout.contains(
                "FAILED  \(backupName): restorable only with --accept-damaged-databases: Data.sqlite was already damaged when the backup was made"
            ), plain.stdout)

        let json = try runStoreBackup(["verify", backupName, "--from", backups, "--json"])
        XCTAssertEqual(json.status, 1)
        let rows = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as! [[String: Any]]
        XCTAssertEqual(rows.first?["ok"] as? Bool, false)
        XCTAssertEqual(rows.first?["damagedDatabases"] as? [String], ["Data.sqlite"])
    }

    func testRestoreRefusesNamingTheDatabaseAndTheOptionAndLeavesTheStore() throws {
        let live = work + "/Live/Stores"
        try StoreFixture.make(at: live, logRows: 50, blobCount: 2)
        let before = try StoreFixture.describe(live)
        let refused = try runStoreBackup(["restore", backupName, live, "--from", backups, "--yes"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("Data.sqlite was already damaged when the backup was made"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("pass --accept-damaged-databases"), refused.stderr)
        XCTAssertEqual(refused.stderr.split(separator: "\n").filter { $0.contains("error:") }.count, 1, "one line: \(refused.stderr)")
        XCTAssertTrue(refused.stderr.split(separator: "\n").last?.contains("--accept-damaged-databases") ?? false, refused.stderr)
        XCTAssertEqual(try StoreFixture.describe(live), before, "a refused restore must not touch the live store")
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work + "/Live").filter { !$0.hasSuffix(".storebackup-lock") }, ["Stores"])
    }

    func testRestoreWithTheOptionGivesTheDatabaseBackAsItWasAndNamesIt() throws {
        let live = work + "/Live/Stores"
        try StoreFixture.make(at: live, logRows: 50, blobCount: 2)
        let restored = try runStoreBackup(["restore", backupName, live, "--from", backups, "--yes", "--accept-damaged-databases", "--json"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let result = try JSONSerialization.jsonObject(with: Data(restored.stdout.utf8)) as! [String: Any]
        XCTAssertEqual(result["damagedDatabases"] as? [String], ["Data.sqlite"])
        XCTAssertTrue(restored.stderr.contains("already damaged") && restored.stderr.contains("Data.sqlite"), restored.stderr)
        // Byte for byte the live database as it was backed up (a rollback-journal database: its file).
        XCTAssertEqual(try sha256(of: live + "/Data.sqlite"), try sha256(of: work + "/Damaged/Stores/Data.sqlite"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: live + "/App.sqlite"), "the old store was replaced")
    }

    func testTheLibraryReportsTheDamageAsItsOwnError() async throws {
        let live = work + "/Library/Stores"
        var helper = StoreHelper(storesDirectory: live, destination: LocalFolderDestination(folder: backups))
        do {
            _ = try await helper.restore(backupName, hooks: .checkDatabases)
            XCTFail("restored a backup of a damaged database without being asked")
        } catch let error as StoreBackupError {
            guard case .databaseDamagedAtSource(let backup, let databases, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(backup, backupName)
            XCTAssertEqual(databases, ["Data.sqlite"])
            XCTAssertEqual(error.remedy, .acceptDamagedDatabases)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: live))
        let result = try await helper.restore(
            backupName, options: RestoreOptions(extraction: ExtractionOptions(acceptDamagedDatabases: true)), hooks: .checkDatabases)
        XCTAssertEqual(result.damagedDatabases, ["Data.sqlite"])
    }

    /// Bytes changed in the archive after it was made: the database fails its check too, but
    /// its bytes do not match the manifest, so the backup is called damaged, not its source.
    func testABackupDamagedAfterItWasMadeIsNotBlamedOnTheSource() throws {
        let store = work + "/Good/Stores"
        try StoreFixture.make(at: store, logRows: 3000, blobCount: 0)
        let created = try runStoreBackup(["create", store, "--to", work + "/stored", "--level", "0"])
        XCTAssertEqual(created.status, 0, created.stderr)
        let archive = try onlyBackup(in: work + "/stored")
        try runPythonScript(
            """
            import sys, zipfile, struct
            path = sys.argv[1]; info = zipfile.ZipFile(path).getinfo("App.sqlite")
            with open(path, "r+b") as f:
                f.seek(info.header_offset); h = f.read(30)
                start = info.header_offset + 30 + struct.unpack("<H", h[26:28])[0] + struct.unpack("<H", h[28:30])[0]
                f.seek(start + 4096 * 5 + 200); f.write(b"\\xff" * 300)
            """, [archive])
        let verified = try runStoreBackup(["verify", "latest", "--from", work + "/stored", "--json"])
        XCTAssertEqual(verified.status, 1)
        let rows = try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as! [[String: Any]]
        let problem = rows.first?["problem"] as? String ?? ""
        XCTAssertTrue(problem.contains("App.sqlite"), problem)
        XCTAssertFalse(problem.contains("already damaged"), problem)
        XCTAssertNil(rows.first?["damagedDatabases"] as? [String])
    }

    /// When SQLite itself calls a live database malformed while create reads it, create says
    /// the database is damaged (not a bare SQLite error) and makes no backup.
    func testCreateSaysSoWhenSQLiteCallsALiveDatabaseMalformed() throws {
        let store = work + "/Malformed/Stores"
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        try runPythonScript(
            """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1] + "/Data.sqlite")
            db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT)")
            db.executemany("INSERT INTO t(x) VALUES (?)", [("row %d" % i,) for i in range(3000)])
            db.commit(); db.close()
            with open(sys.argv[1] + "/Data.sqlite", "r+b") as f:
                f.seek(100); f.write(b"\\xff" * 200)
            """, [store])
        let created = try runStoreBackup(["create", store, "--to", work + "/malformed-backups"])
        XCTAssertNotEqual(created.status, 0)
        XCTAssertTrue(created.stderr.contains("database \(store)/Data.sqlite is damaged in the stores directory"), created.stderr)
        XCTAssertTrue(created.stderr.contains("no backup was made"), created.stderr)
        let made = (try? FileManager.default.contentsOfDirectory(atPath: work + "/malformed-backups")) ?? []
        XCTAssertFalse(made.contains { $0.hasSuffix(" Stores.zip") }, "\(made)")
    }

    private func sha256(of path: String) throws -> String {
        SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: path))).map { String(format: "%02x", $0) }.joined()
    }
}
