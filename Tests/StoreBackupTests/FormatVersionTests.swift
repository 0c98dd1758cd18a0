import Foundation
import XCTest

@testable import StoreBackup

/// Every reader checks the archive's format first: a backup written in a newer format than
/// this build reads (``Manifest/newestReadableFormat``), by its manifest's `format` field or by a
/// `.storebackup/format-N` entry, is refused with "made by a newer storebackup (format N)"
/// by restore, verify, extract and ls, and nothing is changed.
final class FormatVersionTests: XCTestCase {
    var work = ""
    var backups = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("format")
        backups = work + "/backups"
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    static let expectedRefusal =
        "was made by a newer storebackup (format 99); this is storebackup \(StoreBackupVersion.current), which reads formats up to \(Manifest.newestReadableFormat): upgrade storebackup"

    /// A golden format-1 archive copied into `backups`; returns its name.
    private func copyGolden(_ kind: String) throws -> (name: String, password: String?) {
        let folder = GoldenArchiveTests.goldenFolder + "/format-1/" + kind
        let listing =
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: folder + "/listing.json"))) as! [String: Any]
        let name = listing["archive"] as! String
        try FileManager.default.copyItem(atPath: folder + "/" + name, toPath: backups + "/" + name)
        return (name, listing["password"] as? String)
    }

    /// The manifest as Python's zipfile reads it, with `change` applied to its JSON, put back
    /// through libzip (every other entry copied as it is; encrypted again with `password`).
    private func rewriteManifest(_ name: String, password: String?, change: String) throws {
        let archive = backups + "/" + name
        let read = try runTool(
            "/usr/bin/env",
            [
                "python3", "-c",
                """
                import json, sys, zipfile
                z = zipfile.ZipFile(sys.argv[1])
                if sys.argv[2]: z.setpassword(sys.argv[2].encode())
                manifest = json.loads(z.read(".storebackup/manifest.json"))
                \(change)
                print(json.dumps(manifest))
                """, archive, password ?? "",
            ])
        if read.status != 0 && password != nil {
            // Python's zipfile cannot decrypt AES: read it through this build instead.
            let reader = try ArchiveReader(path: archive, backupName: name, passwords: .fixed(try BackupPassword(password!)))
            var manifest = try XCTUnwrap(reader.manifest)
            manifest.format = 99
            try replaceZipEntry(
                archive, entry: Manifest.archivePath, content: String(decoding: try manifest.encoded(), as: UTF8.self), password: password)
            return
        }
        XCTAssertEqual(read.status, 0, read.stderr)
        try replaceZipEntry(archive, entry: Manifest.archivePath, content: read.stdout, password: password)
    }

    /// Restore onto an existing store, verify, extract and ls: each refuses with the one line.
    private func assertEveryReaderRefuses(_ name: String, password: String?, file: StaticString = #filePath, line: UInt = #line) throws {
        var passwordArguments: [String] = []
        if let password {
            FileManager.default.createFile(
                atPath: work + "/password", contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600])
            passwordArguments = ["--password-file", work + "/password"]
        }
        let store = work + "/Live/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 2)
        let before = try StoreFixture.describe(store)
        let restored = try runStoreBackup(["restore", name, store, "--from", backups, "--yes"] + passwordArguments)
        XCTAssertNotEqual(restored.status, 0, file: file, line: line)
        XCTAssertTrue(restored.stderr.contains(Self.expectedRefusal), restored.stderr, file: file, line: line)
        XCTAssertEqual(try StoreFixture.describe(store), before, "the refused restore changed the store", file: file, line: line)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work + "/Live").filter { !$0.hasSuffix(".storebackup-lock") }, ["Stores"],
            file: file, line: line)

        let verified = try runStoreBackup(["verify", name, "--from", backups] + passwordArguments)
        XCTAssertEqual(verified.status, 1, file: file, line: line)
        XCTAssertTrue(
            verified.stdout.contains("FAILED") && verified.stdout.contains("(format 99)"), verified.stdout, file: file, line: line)

        let extracted = try runStoreBackup(["extract", name, "--into", work + "/out", "--from", backups] + passwordArguments)
        XCTAssertNotEqual(extracted.status, 0, file: file, line: line)
        XCTAssertTrue(extracted.stderr.contains(Self.expectedRefusal), extracted.stderr, file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/out"), file: file, line: line)

        let listed = try runStoreBackup(["ls", name, "--from", backups] + passwordArguments)
        XCTAssertNotEqual(listed.status, 0, file: file, line: line)
        XCTAssertTrue(listed.stderr.contains(Self.expectedRefusal), listed.stderr, file: file, line: line)
    }

    func testANewerManifestFormatIsRefusedByEveryReader() throws {
        let (name, _) = try copyGolden("plain")
        try rewriteManifest(name, password: nil, change: "manifest['format'] = 99")
        try assertEveryReaderRefuses(name, password: nil)
    }

    func testANewerFormatIsRefusedInAnEncryptedBackupOnceThePasswordOpensIt() throws {
        let (name, password) = try copyGolden("encrypted")
        try rewriteManifest(name, password: password, change: "manifest['format'] = 99")
        try assertEveryReaderRefuses(name, password: password)
    }

    /// A later format may change the manifest's fields: the format is read before the rest,
    /// so the refusal says "newer", not "damaged".
    func testANewerManifestThatThisVersionCannotDecodeIsStillCalledNewer() throws {
        let (name, _) = try copyGolden("plain")
        try rewriteManifest(name, password: nil, change: "manifest['format'] = 99; manifest['files'] = {'layout': 'different'}")
        try assertEveryReaderRefuses(name, password: nil)
    }

    /// The marker entry of a later format is seen before any entry is judged, even when the
    /// archive holds names this version would refuse.
    func testAFormatMarkerEntryIsRefusedAsNewer() throws {
        let (name, _) = try copyGolden("plain")
        try runPythonScript(
            """
            import sys, zipfile
            with zipfile.ZipFile(sys.argv[1], "a") as z:
                z.writestr("odd\\\\name", b"a name format 1 refuses")
                z.writestr(".storebackup/format-99", b"")
            """, [backups + "/" + name])
        try assertEveryReaderRefuses(name, password: nil)
    }

    func testTheCurrentFormatAndItsMarkersAreAccepted() throws {
        XCTAssertEqual(Manifest.format(ofMarkerEntry: ".storebackup/format-7"), 7)
        XCTAssertNil(Manifest.format(ofMarkerEntry: ".storebackup/format-"))
        XCTAssertNil(Manifest.format(ofMarkerEntry: ".storebackup/format-2x"))
        XCTAssertNil(Manifest.format(ofMarkerEntry: ".storebackup/manifest.json"))
        XCTAssertEqual(try Manifest.decodeFormat(Data(#"{"format": 3, "files": 1}"#.utf8)), 3)
        let (name, _) = try copyGolden("plain")
        let verified = try runStoreBackup(["verify", name, "--from", backups])
        XCTAssertEqual(verified.status, 0, verified.stdout)
    }
}
