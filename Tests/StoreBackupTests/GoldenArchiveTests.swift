import Foundation
import XCTest

@testable import StoreBackup

/// Backups made by earlier versions stay restorable: every archive under
/// Fixtures/golden/format-N/ (made by Tests/Fixtures/golden/make_golden.py with the build of
/// that format, never changed since) is verified and restored with this build, and the
/// restored tree is compared with the listing made beside it when it was created, by an
/// independent walk (tree_listing.py: lstat, SHA-256, SQLite rows), not by this code's
/// manifest or `verify`.
final class GoldenArchiveTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("golden")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// The golden folder as the test bundle holds it (Package.swift copies Fixtures).
    static var goldenFolder: String {
        Bundle.module.resourceURL!.appendingPathComponent("Fixtures/golden").path
    }

    struct Golden {
        let format: Int
        let kind: String
        let folder: String
        let archiveName: String
        let password: String?
        /// What verify and restore need for this archive (e.g. `--allow-outside-links`).
        let options: [String]
        var label: String { "format-\(format)/\(kind)" }
    }

    /// Every golden archive of every format.
    static func goldenArchives() throws -> [Golden] {
        var found: [Golden] = []
        let formats = try FileManager.default.contentsOfDirectory(atPath: goldenFolder).filter { $0.hasPrefix("format-") }
        for formatFolder in formats.sorted() {
            let format = Int(formatFolder.dropFirst("format-".count))!
            let kinds = try FileManager.default.contentsOfDirectory(atPath: goldenFolder + "/" + formatFolder)
            for kind in kinds.sorted() {
                let folder = goldenFolder + "/" + formatFolder + "/" + kind
                guard FileManager.default.fileExists(atPath: folder + "/listing.json") else { continue }
                let listing =
                    try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: folder + "/listing.json")))
                    as! [String: Any]
                found.append(
                    Golden(
                        format: format, kind: kind, folder: folder, archiveName: listing["archive"] as! String,
                        password: listing["password"] as? String, options: listing["options"] as? [String] ?? []))
            }
        }
        return found
    }

    /// Every file of every format's golden folder is pinned by its SHA-256 in
    /// Fixtures/golden/SHA256SUMS (`sha256sum` format), and nothing else is there: a golden
    /// archive regenerated or changed by accident fails here, not silently elsewhere.
    func testEveryGoldenFileIsPinnedBySHA256() throws {
        let sums = try String(contentsOfFile: Self.goldenFolder + "/SHA256SUMS", encoding: .utf8)
        var pinned: [String: String] = [:]
        for line in sums.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            XCTAssertEqual(parts.count, 2, "\(line)")
            pinned[String(parts[1].drop { $0 == " " || $0 == "*" })] = String(parts[0])
        }
        var found: [String: String] = [:]
        let walker = FileManager.default.enumerator(atPath: Self.goldenFolder)
        while let relative = walker?.nextObject() as? String {
            guard relative.hasPrefix("format-") else { continue }
            let path = Self.goldenFolder + "/" + relative
            let info = try FileSystem.lstatInfo(path)
            guard info.st_mode & S_IFMT == S_IFREG else { continue }
            found[relative] = try FileDigest.sha256(file: path, length: Int64(info.st_size))
        }
        XCTAssertGreaterThanOrEqual(found.count, 26, "the golden archives and their listings")
        XCTAssertEqual(Set(found.keys), Set(pinned.keys), "files not pinned, or pinned and missing")
        for (relative, sha256) in found.sorted(by: { $0.key < $1.key }) {
            XCTAssertEqual(sha256, pinned[relative], "\(relative) differs from its pinned SHA-256")
        }
    }

    func testTheFormatOneArchivesAreAllThere() throws {
        let kinds = Set(try Self.goldenArchives().filter { $0.format == 1 }.map(\.kind))
        XCTAssertEqual(kinds, ["plain", "encrypted", "links", "metadata", "databases"])
    }

    func testTheFormatTwoArchivesAreAllThere() throws {
        let kinds = Set(try Self.goldenArchives().filter { $0.format == 2 }.map(\.kind))
        XCTAssertEqual(kinds, ["plain", "encrypted", "links", "metadata", "databases", "names", "special", "outside-links"])
    }

    func testEveryGoldenArchiveVerifiesAndRestoresAsItsListingSays() throws {
        let archives = try Self.goldenArchives()
        XCTAssertFalse(archives.isEmpty, "no golden archives under \(Self.goldenFolder)")
        for golden in archives {
            try checkRestore(golden)
        }
    }

    /// A golden archive's manifest declares the format of its folder.
    func testGoldenManifestsDeclareTheirFormat() throws {
        for golden in try Self.goldenArchives() where golden.password == nil {
            let reader = try ArchiveReader(path: golden.folder + "/" + golden.archiveName, backupName: golden.archiveName)
            XCTAssertEqual(reader.manifest?.format, golden.format, golden.label)
        }
    }

    private func checkRestore(_ golden: Golden, file: StaticString = #filePath, line: UInt = #line) throws {
        let backups = work + "/\(golden.format)-\(golden.kind)/backups"
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: golden.folder + "/" + golden.archiveName, toPath: backups + "/" + golden.archiveName)
        var passwordArguments: [String] = []
        if let password = golden.password {
            let passwordFile = work + "/\(golden.format)-\(golden.kind)/password"
            FileManager.default.createFile(
                atPath: passwordFile, contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600])
            passwordArguments = ["--password-file", passwordFile]
        }
        let verified = try runStoreBackup(["verify", golden.archiveName, "--from", backups] + passwordArguments + golden.options)
        XCTAssertEqual(verified.status, 0, "\(golden.label): verify: \(verified.stdout) \(verified.stderr)", file: file, line: line)

        let stores = work + "/\(golden.format)-\(golden.kind)/Restored/Stores"
        let restored = try runStoreBackup(
            ["restore", golden.archiveName, stores, "--from", backups, "--yes"] + passwordArguments + golden.options)
        XCTAssertEqual(restored.status, 0, "\(golden.label): restore: \(restored.stderr)", file: file, line: line)
        guard restored.status == 0 else { return }

        let compared = try runTool(
            "/usr/bin/env",
            [
                "python3", Self.goldenFolder + "/tree_listing.py", "--compare",
                golden.folder + "/listing.json", stores,
            ])
        XCTAssertEqual(
            compared.status, 0, "\(golden.label) restored differently:\n\(compared.stdout)\(compared.stderr)", file: file, line: line)
    }
}
