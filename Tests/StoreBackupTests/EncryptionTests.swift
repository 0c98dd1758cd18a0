import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance for encrypted backups: round trip, 7-Zip compatibility, nothing readable
/// without the password, the password checked before any extraction, verify naming each
/// fault, and the password never showing up anywhere.
final class EncryptionTests: XCTestCase {
    static let password = "Corr3ct-h0rse \u{00e9}t\u{00e9} battery"
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var passwordFile: String { work + "/password" }
    var withPassword: [String: String] { ["STOREBACKUP_PASSWORD": Self.password] }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("encrypt")
        // Enough log rows that App.sqlite spans several 1 MiB blocks: restore then takes the
        // parallel decrypt-and-inflate path, not libzip's sequential one.
        try StoreFixture.make(at: store, logRows: 8_000)
        XCTAssertTrue(
            FileManager.default.createFile(
                atPath: passwordFile, contents: Data((Self.password + "\n").utf8),
                attributes: [.posixPermissions: 0o600]))
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func createEncrypted(_ store: String, to folder: String, extra: [String] = []) throws -> String {
        let created = try runStoreBackup(["create", store, "--to", folder, "--encrypt", "--password-file", passwordFile] + extra)
        XCTAssertEqual(created.status, 0, created.stderr)
        return folder + "/" + created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testRoundTripAndSevenZipReadsIt() throws {
        let archive = try createEncrypted(store, to: backups)
        let manifest = try XCTUnwrap(
            ArchiveReader(path: archive, backupName: "test", passwords: .fixed(BackupPassword(Self.password))).manifest)
        let blocks = manifest.files.first { $0.path == "App.sqlite" }?.deflateBlocks ?? []
        XCTAssertGreaterThan(blocks.count, 1, "App.sqlite should be restored through the parallel path")

        let sevenZip = try runTool("/usr/bin/7z", ["t", "-p" + Self.password, archive])
        XCTAssertEqual(sevenZip.status, 0, sevenZip.stdout + sevenZip.stderr)
        XCTAssertTrue(sevenZip.stdout.contains("Everything is Ok"), sevenZip.stdout)
        let wrong = try runTool("/usr/bin/7z", ["t", "-pnot-the-password", archive])
        XCTAssertNotEqual(wrong.status, 0, "7-Zip must not open it with another password")

        let listed = try runStoreBackup(["list", "--to", backups, "--json"])
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as! [[String: Any]]
        XCTAssertEqual(rows.first?["encrypted"] as? Bool, true, listed.stdout)
        let plainList = try runStoreBackup(["list", "--to", backups])
        XCTAssertTrue(plainList.stdout.contains("encrypted"), plainList.stdout)

        let restored = work + "/Restored"
        let result = try runStoreBackup(["restore", "latest", restored, "--from", backups, "--yes"], environment: withPassword)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(
            try StoreFixture.describe(restored, includeJournals: false),
            try StoreFixture.describe(store, includeJournals: false))
    }

    func testStoredBytesDoNotAppearInTheArchive() throws {
        // Level 0 stores everything, so without encryption every file's bytes would be in
        // the archive as they are; the plain backup proves the check can fail.
        let marker = Array("storebackup-known-plaintext-\(UUID().uuidString)".utf8)
        let content = Array(repeating: marker, count: 2000).flatMap { $0 }
        XCTAssertTrue(FileManager.default.createFile(atPath: store + "/known.txt", contents: Data(content)))
        let plain = try runStoreBackup(["create", store, "--to", work + "/plain", "--level", "0"])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        let plainBytes = try Data(contentsOf: URL(fileURLWithPath: try onlyBackup(in: work + "/plain")))
        XCTAssertNotNil(plainBytes.range(of: Data(marker)), "a stored, unencrypted backup shows the file's bytes")

        let archive = try createEncrypted(store, to: backups, extra: ["--level", "0"])
        let sealed = try Data(contentsOf: URL(fileURLWithPath: archive))
        XCTAssertNil(sealed.range(of: Data(marker)), "the known file's bytes must not be readable")
        XCTAssertNil(sealed.range(of: Data("seed row 1".utf8)), "database pages must not be readable")
        XCTAssertNil(sealed.range(of: Data("token=not-a-real-one".utf8)))
        XCTAssertNil(sealed.range(of: Data("\"sha256\"".utf8)), "the manifest is encrypted too")
        XCTAssertNil(sealed.range(of: Data(Self.password.utf8)))
    }

    func testWrongOrMissingPasswordLeavesTheStoreUntouched() throws {
        _ = try createEncrypted(store, to: backups)
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let before = try StoreFixture.describe(store)
        let layout = StoreLayout(storesDirectory: store)

        let wrong = try runStoreBackup(
            ["restore", "latest", store, "--from", backups, "--yes"],
            environment: ["STOREBACKUP_PASSWORD": "not the password"])
        XCTAssertEqual(wrong.status, 1)
        XCTAssertTrue(wrong.stderr.contains("error: wrong password"), wrong.stderr)
        XCTAssertEqual(wrong.stderr.components(separatedBy: "error:").count - 1, 1, "one clear error: \(wrong.stderr)")
        XCTAssertFalse(wrong.stderr.contains("extracting"), "nothing may be extracted before the password is checked")

        let missing = try runStoreBackup(
            ["restore", "latest", store, "--from", backups, "--yes"], environment: ["STOREBACKUP_PASSWORD": ""])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderr.contains("is encrypted; give its password"), missing.stderr)

        for result in [wrong, missing] {
            XCTAssertFalse(result.stderr.contains(Self.password))
        }
        XCTAssertEqual(try StoreFixture.describe(store), before, "the live store must be byte-identical")
        XCTAssertFalse(FileSystem.fileExists(layout.new), "no Stores_New left")
        XCTAssertFalse(FileSystem.fileExists(layout.journal), "no journal left")
        XCTAssertFalse(FileSystem.fileExists(layout.old))
    }

    func testVerifyNamesEachFaultOfEncryptedBackups() throws {
        let good = try createEncrypted(store, to: backups)
        let flipped = backups + "/2000-01-01 000001 Stores.zip"
        try FileManager.default.copyItem(atPath: good, toPath: flipped)
        try flipByte(in: flipped, entry: "App.sqlite")
        let flippedSmall = backups + "/2000-01-01 000002 Stores.zip"
        try FileManager.default.copyItem(atPath: good, toPath: flippedSmall)
        try flipByte(in: flippedSmall, entry: "Settings.sqlite")
        let truncated = backups + "/2000-01-01 000003 Stores.zip"
        try FileManager.default.copyItem(atPath: good, toPath: truncated)
        XCTAssertEqual(truncate(truncated, try FileSystem.lstatInfo(truncated).st_size - 300), 0)
        let mismatch = backups + "/2000-01-01 000004 Stores.zip"
        try replaceEntryKeepingManifest(good, into: mismatch, entry: ".secret-config", content: "token=changed\n")
        let corruptDatabase = backups + "/2000-01-01 000005 Stores.zip"
        try makeEncryptedBackupOfCorruptDatabase(into: corruptDatabase)

        let result = try runStoreBackup(["verify", "--all", "--from", backups, "--json", "--password-file", passwordFile])
        XCTAssertEqual(result.status, 1, result.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [[String: Any]]
        var byName: [String: [String: Any]] = [:]
        for row in rows { byName[row["name"] as! String] = row }
        func problem(_ path: String) -> String { byName[FileSystem.lastComponent(of: path)]?["problem"] as? String ?? "" }
        XCTAssertEqual(byName[FileSystem.lastComponent(of: good)]?["ok"] as? Bool, true, result.stdout)
        XCTAssertTrue(problem(flipped).contains("App.sqlite"), problem(flipped))
        XCTAssertTrue(problem(flippedSmall).contains("Settings.sqlite"), problem(flippedSmall))
        XCTAssertTrue(problem(truncated).contains("damaged"), problem(truncated))
        XCTAssertTrue(problem(mismatch).contains(".secret-config") && problem(mismatch).contains("checksum"), problem(mismatch))
        XCTAssertTrue(problem(corruptDatabase).contains("integrity check"), problem(corruptDatabase))

        let wrong = try runStoreBackup(
            ["verify", FileSystem.lastComponent(of: good), "--from", backups],
            environment: ["STOREBACKUP_PASSWORD": "guess"])
        XCTAssertEqual(wrong.status, 1)
        XCTAssertTrue(wrong.stdout.hasPrefix("FAILED") && wrong.stdout.contains("wrong password"), wrong.stdout)
        let ok = try runStoreBackup(["verify", FileSystem.lastComponent(of: good), "--from", backups], environment: withPassword)
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr)
        XCTAssertTrue(ok.stdout.hasPrefix("ok"), ok.stdout)
    }

    func testThePasswordNeverAppearsInOutput() throws {
        var outputs: [CommandResult] = []
        outputs.append(try runStoreBackup(["create", store, "--to", backups, "--encrypt", "--json"], environment: withPassword))
        XCTAssertEqual(outputs.last?.status, 0, outputs.last?.stderr ?? "")
        outputs.append(try runStoreBackup(["create", store, "--to", backups, "--encrypt", "--password-file", passwordFile]))
        outputs.append(try runStoreBackup(["list", "--to", backups, "--json"], environment: withPassword))
        outputs.append(try runStoreBackup(["verify", "--all", "--from", backups, "--json"], environment: withPassword))
        outputs.append(
            try runStoreBackup(["verify", "--all", "--from", backups], environment: ["STOREBACKUP_PASSWORD": Self.password + "x"]))
        outputs.append(
            try runStoreBackup(["restore", "latest", work + "/Restored", "--from", backups, "--yes"], environment: withPassword))
        XCTAssertEqual(outputs.last?.status, 0, outputs.last?.stderr ?? "")
        // A password file others can read is refused (and its content not echoed).
        let loose = work + "/loose-password"
        XCTAssertTrue(
            FileManager.default.createFile(atPath: loose, contents: Data(Self.password.utf8), attributes: [.posixPermissions: 0o644]))
        let refused = try runStoreBackup(["create", store, "--to", backups, "--encrypt", "--password-file", loose])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("chmod 600"), refused.stderr)
        outputs.append(refused)
        // --encrypt without any password source fails clearly instead of writing a plain backup.
        let none = try runStoreBackup(["create", store, "--to", work + "/none", "--encrypt"], environment: ["STOREBACKUP_PASSWORD": ""])
        XCTAssertEqual(none.status, 1)
        XCTAssertTrue(none.stderr.contains("--encrypt needs a password"), none.stderr)
        let written = (try? FileManager.default.contentsOfDirectory(atPath: work + "/none")) ?? []
        XCTAssertTrue(written.isEmpty, "no backup may be written without a password: \(written)")

        for output in outputs {
            XCTAssertFalse(output.stdout.contains(Self.password), output.stdout)
            XCTAssertFalse(output.stderr.contains(Self.password), output.stderr)
        }
    }

    func testTerminalPromptAsksTwiceWithoutEcho() throws {
        // A real pseudo-terminal (pexpect): the password is typed, never shown.
        let script = """
            import pexpect, sys
            binary, store, folder, password = sys.argv[1:5]
            child = pexpect.spawn(binary, ["create", store, "--to", folder, "--encrypt"], env={"PATH": "/usr/bin:/bin"}, encoding="utf-8", timeout=120)
            child.expect("Backup password: "); child.sendline(password)
            child.expect("Repeat the password: "); child.sendline(password)
            child.expect(pexpect.EOF); child.close()
            sys.stdout.write(child.before or ""); sys.exit(child.exitstatus)
            """
        let result = try runTool("/usr/bin/env", ["python3", "-c", script, TestEnvironment.binary, store, backups, Self.password])
        XCTAssertEqual(result.status, 0, result.stdout + result.stderr)
        XCTAssertFalse(result.stdout.contains(Self.password), "the password was echoed: \(result.stdout)")
        let archive = try onlyBackup(in: backups)
        XCTAssertEqual(BackupInspection.isEncrypted(archiveAt: archive), true)
        let sevenZip = try runTool("/usr/bin/7z", ["t", "-p" + Self.password, archive])
        XCTAssertEqual(sevenZip.status, 0, sevenZip.stdout)
    }

    /// The fast PBKDF2 against RFC 6070's vectors and Python's (OpenSSL's) hashlib.
    func testKeyDerivationMatchesReferenceValues() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        func derive(_ password: String, _ salt: [UInt8], _ rounds: Int, _ count: Int) -> String {
            hex(PBKDF2SHA1.derive(password: Array(password.utf8), salt: salt, rounds: rounds, count: count))
        }
        XCTAssertEqual(derive("password", Array("salt".utf8), 1, 20), "0c60c80f961f0e71f3a9b524af6012062fe037a6")
        XCTAssertEqual(derive("password", Array("salt".utf8), 2, 20), "ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957")
        XCTAssertEqual(derive("password", Array("salt".utf8), 4096, 20), "4b007901b765489abead49d926f721d065a429c1")
        XCTAssertEqual(
            derive("passwordPASSWORDpassword", Array("saltSALTsaltSALTsaltSALTsaltSALTsalt".utf8), 4096, 25),
            "3d2eec4fe41c849b80c8d83662c0e44a8b291a964cf2f07038")
        XCTAssertEqual(derive("pass\u{0}word", Array("sa\u{0}lt".utf8), 4096, 16), "56fa6aa75548099dcc37d7f03425e0c3")
        // WinZip's shape (1000 rounds, 66 bytes), a key longer than a SHA-1 block, non-ASCII text.
        XCTAssertEqual(
            derive("bench-pw", Array(0..<16), 1000, 66),
            "0fbbdb34ebbe3d9312d330ca17c526adb6626f203395e10d0e8e6588c95ae256b047e15b2aef2ec434788ae5e99daa4f4b6e5bf91a2ea930b56e296128717736d321"
        )
        XCTAssertEqual(
            derive(String(repeating: "x", count: 100), Array("salty".utf8), 1000, 66),
            "dfea61d805f57ca89fdbc803e962b9f95521d03f9b06c7fff25898b5e0c2bfdd243042a5f849d0a92cd7ff1b9e4b49ea87eb2a0b5f930152dd35ff17aed832b30ca3"
        )
        XCTAssertEqual(
            derive(Self.password, [UInt8](repeating: 0, count: 16), 1000, 66),
            "3c3d261647e3cc060c47e710a8e6d65059e725319bf515b7c4b105ee8471a62762e02d992ee2ab2817680b32a483034ed92ed3d180e7e6411a3ad4032d3377c33ab8"
        )
    }

    /// Counter mode at any offset gives the same bytes as one pass from the start, so blocks
    /// can be encrypted on different threads.
    func testCounterModeAtAnyOffsetMatchesOnePass() throws {
        let key = [UInt8](repeating: 7, count: 32)
        var whole = [UInt8](repeating: 0, count: 100_003)
        var pieces = whole
        let ctr = try WinZipCTR(key: key)
        whole.withUnsafeMutableBytes { ctr.apply(to: $0.baseAddress!, count: $0.count, at: 0) }
        XCTAssertNotEqual(whole, pieces)
        var offset = 0
        for length in [1, 15, 16, 17, 4095, 65_536, 30_323] {
            pieces.withUnsafeMutableBytes { ctr.apply(to: $0.baseAddress! + offset, count: length, at: Int64(offset)) }
            offset += length
        }
        XCTAssertEqual(offset, whole.count)
        XCTAssertEqual(pieces, whole)
    }

    // MARK: helpers

    /// Flips one byte in the middle of an entry's stored (encrypted) data.
    func testConfiguredStoreIsEncryptedAndItsRetentionReadsEncryptedBackups() throws {
        let configuration = work + "/storebackup.yml"
        try """
        stores:
          - name: app
            path: \(store)
            destination: \(backups)
            schedule: daily 03:00
            encrypt: {password-file: \(passwordFile)}
            retention: {keep-last: 1}
        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        let environment = ["STOREBACKUP_STATE_DIR": work + "/state"]
        let first = try runStoreBackup(["create", "--config", configuration, "--store", "app", "--json"], environment: environment)
        XCTAssertEqual(first.status, 0, first.stderr)
        let firstName = try XCTUnwrap(
            (try JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any])?["name"] as? String)
        XCTAssertThrowsError(try ArchiveReader(path: backups + "/" + firstName, backupName: firstName), "needs the password")
        // A copy under an older name is not in the origin cache: retention must open it with
        // the password file to learn it belongs to this store (else it would be kept).
        let older = BackupName.make(for: Date(timeIntervalSinceNow: -86_400))
        try FileManager.default.copyItem(atPath: backups + "/" + firstName, toPath: backups + "/" + older)

        let second = try runStoreBackup(["create", "--config", configuration, "--store", "app", "--prune"], environment: environment)
        XCTAssertEqual(second.status, 0, second.stderr)
        let secondName = second.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let remaining = try FileManager.default.contentsOfDirectory(atPath: backups).filter(BackupName.isBackup)
        XCTAssertEqual(remaining, [secondName], "keep-last 1 leaves only the newest")
        XCTAssertEqual(BackupInspection.isEncrypted(archiveAt: backups + "/" + secondName), true)
        XCTAssertFalse((second.stdout + second.stderr).contains(Self.password))
    }

    private func flipByte(in archive: String, entry: String) throws {
        try runPythonScript(
            """
            import sys, zipfile, struct
            path, name = sys.argv[1], sys.argv[2]
            info = zipfile.ZipFile(path).getinfo(name)
            with open(path, "r+b") as f:
                f.seek(info.header_offset); h = f.read(30)
                start = info.header_offset + 30 + struct.unpack("<H", h[26:28])[0] + struct.unpack("<H", h[28:30])[0]
                where = start + 18 + (info.compress_size - 28) // 2
                f.seek(where); b = f.read(1)
                f.seek(where); f.write(bytes([b[0] ^ 0x55]))
            """, [archive, entry])
    }

    /// Replaces one entry's content (encrypted again), keeping every other entry and the
    /// manifest exactly as they were.
    private func replaceEntryKeepingManifest(_ source: String, into target: String, entry: String, content: String) throws {
        try FileManager.default.copyItem(atPath: source, toPath: target)
        try replaceZipEntry(target, entry: entry, content: content, password: Self.password)
    }

    /// An encrypted backup of a store whose database has a damaged page.
    private func makeEncryptedBackupOfCorruptDatabase(into archive: String) throws {
        let corrupt = work + "/Corrupt"
        try StoreFixture.makeWithCorruptDatabase(at: corrupt)
        let made = try createEncrypted(corrupt, to: work + "/corrupt-backups")
        try FileManager.default.moveItem(atPath: made, toPath: archive)
    }
}
