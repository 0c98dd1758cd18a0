import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// Create checks each database once and proves it; restore and verify skip `integrity_check`
/// only for a proof that authenticates under a key the destination does not hold. Every
/// other proof (bound to other bytes, forged, made with another key, on a damaged database)
/// is ignored, the database checked, and the reason reported.
final class DatabaseProofTests: XCTestCase {
    var work = ""
    var backups: String { work + "/backups" }
    var store: String { work + "/Source/Stores" }
    var key: String { work + "/keys/proof.key" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("proofs")
        try StoreFixture.make(at: store, logRows: 400, blobCount: 2)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func create(_ extra: [String] = [], environment: [String: String] = [:]) throws -> String {
        let created = try runStoreBackup(["create", store, "--to", backups, "--proof-key", key] + extra, environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `restore --json`'s object; the restore must succeed.
    private func restore(_ name: String, _ extra: [String]) throws -> [String: Any] {
        let target = work + "/Restored-\(UUID().uuidString)/Stores"
        let restored = try runStoreBackup(["restore", name, target, "--from", backups, "--yes", "--json"] + extra)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertEqual(try StoreFixture.describe(target), try StoreFixture.describe(store), "the restored store")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(restored.stdout.utf8)) as? [String: Any])
    }

    func testAProvenDatabaseSkipsItsCheckUnlessAskedAndTheKeyIsPrivate() throws {
        let name = try create()
        let info = try FileSystem.lstatInfo(key)
        XCTAssertEqual(info.st_mode & 0o777, 0o600, "the proof key is its owner's only")

        let proven = try restore(name, ["--proof-key", key])
        XCTAssertEqual(proven["databasesProven"] as? [String], ["App.sqlite", "Settings.sqlite"])
        XCTAssertEqual(proven["databasesChecked"] as? [String], [])

        let checked = try restore(name, ["--proof-key", key, "--check-databases"])
        XCTAssertEqual(checked["databasesProven"] as? [String], [])
        XCTAssertEqual((checked["checkReasons"] as? [String: String])?["App.sqlite"], "asked to check every database")

        let verified = try runStoreBackup(["verify", name, "--from", backups, "--json", "--proof-key", key])
        XCTAssertEqual(verified.status, 0, verified.stderr)
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(rows.first?["provenDatabases"] as? [String], ["App.sqlite", "Settings.sqlite"])

        // A key others can read could forge proofs: refused when named.
        chmod(key, 0o644)
        let refused = try runStoreBackup(["restore", name, work + "/Refused", "--from", backups, "--yes", "--proof-key", key])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("others can read it"), refused.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/Refused"))
    }

    /// A point's patched databases are read once by the page scan, then let go; their check
    /// must still finish (it was stopped with them, so a point often carried no proof). A
    /// database large enough that its check outlasts the scan, three points in a row: each
    /// proves every database, and its restore skips the checks.
    func testEveryPointOfAChainIsProvenAndItsRestoreSkipsTheChecks() throws {
        try shell(
            "python3 -c \"import sqlite3; db = sqlite3.connect('\(store)/App.sqlite'); "
                + "db.execute('CREATE TABLE bulk(payload BLOB)'); "
                + "db.executemany('INSERT INTO bulk VALUES (randomblob(3000))', [()] * 12000); db.commit()\"")
        _ = try create(["--incremental"])
        for step in 1...3 {
            try shell(
                "python3 -c \"import sqlite3; db = sqlite3.connect('\(store)/App.sqlite'); "
                    + "db.execute('UPDATE bulk SET payload = randomblob(3000) WHERE rowid % 97 = \(step)'); db.commit()\"")
            let point = try create(["--incremental", "--max-chain", "10"])
            XCTAssertTrue(point.contains(" incremental on "), point)
            let restored = try restore(point, ["--proof-key", key])
            XCTAssertEqual(restored["databasesProven"] as? [String], ["App.sqlite", "Settings.sqlite"], "point \(step)")
        }
    }

    private func shell(_ command: String) throws {
        let result = try runTool("/bin/sh", ["-c", command])
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    func testWithoutTheKeyOrWithAnotherKeyTheDatabasesAreChecked() throws {
        let name = try create()
        let missing = try restore(name, [], environment: ["STOREBACKUP_PROOF_KEY_FILE": work + "/nowhere/proof.key"])
        XCTAssertEqual(missing["databasesProven"] as? [String], [])
        XCTAssertTrue(
            ((missing["checkReasons"] as? [String: String])?["App.sqlite"] ?? "").hasPrefix("no proof key on this machine"),
            "\(missing)")

        let other = work + "/keys/other.key"
        _ = try ProofKey.loadOrCreate(at: other)
        let changed = try restore(name, ["--proof-key", other])
        XCTAssertEqual(changed["databasesProven"] as? [String], [])
        XCTAssertTrue(
            ((changed["checkReasons"] as? [String: String])?["App.sqlite"] ?? "").hasPrefix("its proof was made with another proof key"),
            "\(changed)")
    }

    func testAProofBoundToOtherBytesIsIgnored() throws {
        let name = try create()
        try editManifest(name) { manifest in
            var databases = manifest["databases"] as! [[String: Any]]
            var proof = databases[0]["proof"] as! [String: Any]
            proof["sha256"] = String(repeating: "ab", count: 32)
            databases[0]["proof"] = proof
            manifest["databases"] = databases
        }
        let result = try restore(name, ["--proof-key", key])
        XCTAssertEqual(result["databasesProven"] as? [String], ["Settings.sqlite"])
        XCTAssertEqual(
            (result["checkReasons"] as? [String: String])?["App.sqlite"], "its proof is for other bytes (another SHA-256 or size)")
    }

    /// Whoever can write to the destination swaps in a damaged database, with its checksum and a
    /// proof of it: without the key the proof cannot authenticate, so the check runs and finds
    /// the damage, and the live store is left as it was.
    func testAForgedProofOnADamagedDatabaseIsIgnoredAndTheDamageFound() throws {
        let name = try create()
        let archive = backups + "/" + name
        let damaged = work + "/damaged.sqlite"
        try runPythonScript(
            """
            import sys, zipfile
            data = bytearray(zipfile.ZipFile(sys.argv[1]).read("App.sqlite"))
            for page in range(1, 6):  # the b-tree headers of pages 2-6: plainly damaged
                data[4096 * page: 4096 * page + 12] = b"\\xff" * 12
            open(sys.argv[2], "wb").write(data)
            """, [archive, damaged])
        let bytes = try Data(contentsOf: URL(fileURLWithPath: damaged))
        let sha = FileDigest.hex(Array(SHA256.hash(data: bytes)))
        try replaceZipEntry(archive, entry: "App.sqlite", file: damaged)
        try editManifest(name) { manifest in
            var files = manifest["files"] as! [[String: Any]]
            let index = files.firstIndex { $0["path"] as? String == "App.sqlite" }!
            files[index]["sha256"] = sha
            files[index]["deflateBlocks"] = nil
            files[index]["deflateBlockSize"] = nil
            manifest["files"] = files
            var databases = manifest["databases"] as! [[String: Any]]
            var proof = databases[0]["proof"] as! [String: Any]
            proof["sha256"] = sha
            proof["mac"] = String(repeating: "0", count: 64)
            databases[0]["proof"] = proof
            manifest["databases"] = databases
        }
        let live = work + "/Live/Stores"
        try StoreFixture.make(at: live, logRows: 10, blobCount: 1)
        let before = try StoreFixture.describe(live)
        let refused = try runStoreBackup(["restore", name, live, "--from", backups, "--yes", "--proof-key", key])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("App.sqlite was already damaged when the backup was made"), refused.stderr)
        XCTAssertEqual(try StoreFixture.describe(live), before, "a refused restore must not touch the live store")

        let verified = try runStoreBackup(["verify", name, "--from", backups, "--json", "--proof-key", key])
        XCTAssertEqual(verified.status, 1)
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(
            (rows.first?["checkReasons"] as? [String: String])?["App.sqlite"], "its proof does not authenticate (forged or altered)")
    }

    /// An encrypted backup's proofs are keyed by its password: no key file is made or needed,
    /// and a proof altered inside the archive (re-encrypted with the password) is not trusted.
    func testAnEncryptedBackupsProofsAreKeyedByItsPassword() throws {
        let passwordFile = work + "/password"
        try "correct horse\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        chmod(passwordFile, 0o600)
        let noKey = ["STOREBACKUP_PROOF_KEY_FILE": work + "/nowhere/proof.key"]
        let created = try runStoreBackup(
            ["create", store, "--to", backups, "--encrypt", "--password-file", passwordFile], environment: noKey)
        XCTAssertEqual(created.status, 0, created.stderr)
        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/nowhere"), "an encrypted backup makes no key file")

        let proven = try restore(name, ["--password-file", passwordFile], environment: noKey)
        XCTAssertEqual(proven["databasesProven"] as? [String], ["App.sqlite", "Settings.sqlite"])

        let archive = backups + "/" + name
        let reader = try ArchiveReader(path: archive, backupName: name, passwords: .fixed(try BackupPassword("correct horse")))
        var manifest = try XCTUnwrap(reader.manifest)
        reader.release()
        manifest.databases[0].proof?.sha256 = String(repeating: "cd", count: 32)
        manifest.databases[0].proof?.size = 1
        try replaceZipEntry(
            archive, entry: Manifest.archivePath, content: String(decoding: try manifest.encoded(), as: UTF8.self),
            password: "correct horse")
        let altered = try restore(name, ["--password-file", passwordFile], environment: noKey)
        XCTAssertEqual(altered["databasesProven"] as? [String], ["Settings.sqlite"])
        XCTAssertEqual(
            (altered["checkReasons"] as? [String: String])?["App.sqlite"], "its proof is for other bytes (another SHA-256 or size)")

        // Bound to the right bytes but authenticated by nothing the reader has.
        manifest.databases[0].proof = ProofSigner(proofKey: try ProofKey.loadOrCreate(at: work + "/keys/attacker.key")).proof(
            sha256: manifest.files.first { $0.path == "App.sqlite" }!.sha256!, size: manifest.files.first { $0.path == "App.sqlite" }!.size)
        manifest.databases[0].proof?.key = "password"
        try replaceZipEntry(
            archive, entry: Manifest.archivePath, content: String(decoding: try manifest.encoded(), as: UTF8.self),
            password: "correct horse")
        let forged = try restore(name, ["--password-file", passwordFile], environment: noKey)
        XCTAssertEqual(
            (forged["checkReasons"] as? [String: String])?["App.sqlite"], "its proof does not authenticate (forged or altered)")
    }

    func testADatabaseDamagedInTheLiveStoreIsReportedAtCreateAndGetsNoProof() throws {
        let damaged = work + "/Damaged/Stores"
        try StoreFixture.makeWithCorruptDatabase(at: damaged)
        let created = try runStoreBackup(["create", damaged, "--to", backups, "--proof-key", key])
        XCTAssertEqual(created.status, 0, created.stderr)
        XCTAssertTrue(created.stderr.contains("database Data.sqlite fails PRAGMA integrity_check in the live store"), created.stderr)
        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let reader = try ArchiveReader(path: backups + "/" + name, backupName: name)
        XCTAssertNil(try XCTUnwrap(reader.manifest).databases.first?.proof, "no proof for a database that fails its check")
    }

    private func restore(_ name: String, _ extra: [String], environment: [String: String]) throws -> [String: Any] {
        let target = work + "/Restored-\(UUID().uuidString)/Stores"
        let restored = try runStoreBackup(
            ["restore", name, target, "--from", backups, "--yes", "--json"] + extra, environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(restored.stdout.utf8)) as? [String: Any])
    }

    /// Rewrites a plain backup's manifest through `edit` (JSON objects, as any tool could).
    private func editManifest(_ name: String, _ edit: (inout [String: Any]) -> Void) throws {
        let archive = backups + "/" + name
        let reader = try ArchiveReader(path: archive, backupName: name)
        var object = try XCTUnwrap(try JSONSerialization.jsonObject(with: try XCTUnwrap(reader.manifest).encoded()) as? [String: Any])
        reader.release()
        edit(&object)
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        try replaceZipEntry(archive, entry: Manifest.archivePath, content: String(decoding: data, as: UTF8.self))
    }
}
