import Foundation
import XCTest

@testable import StoreBackup

/// Backups made by earlier versions stay restorable: every archive under
/// Fixtures/golden/format-N/ (made by Tests/Fixtures/golden/make_golden.py with the build of
/// that format, never changed since) is verified and restored with this build, and the
/// restored tree is compared with the listing made beside it when it was created, by an
/// independent walk (tree_listing.py: lstat, SHA-256, SQLite rows), not by this code's
/// manifest or `verify`. Format 3's are chains (a full, then incrementals on it): every
/// backup of each is verified and restored to the tree the store had when it was made.
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
        /// (Format 3.) The backups of the chain, the full first; the newest is `archiveName`.
        let chain: [Link]
        var label: String { "format-\(format)/\(kind)" }
        /// The archives to copy to a destination: the whole chain, or the one archive.
        var archiveNames: [String] { chain.isEmpty ? [archiveName] : chain.map(\.archive) }
    }

    /// One backup of a golden chain, as its listing.json's `chain` gives it.
    struct Link {
        let archive: String
        /// "full" or "incremental".
        let kind: String
        let base: String?
        /// (Incrementals.) For each path of its tree, the backup whose archive holds the
        /// content (nil: this one), worked out by make_golden.py from the trees alone.
        let holders: [String: String?]
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
                let chain = (listing["chain"] as? [[String: Any]] ?? []).map { link in
                    Link(
                        archive: link["archive"] as! String, kind: link["kind"] as! String, base: link["base"] as? String,
                        holders: (link["in"] as? [String: Any] ?? [:]).mapValues { $0 as? String })
                }
                found.append(
                    Golden(
                        format: format, kind: kind, folder: folder, archiveName: listing["archive"] as! String,
                        password: listing["password"] as? String, options: listing["options"] as? [String] ?? [],
                        chain: chain))
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
        XCTAssertGreaterThanOrEqual(found.count, 33, "the golden archives and their listings")
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

    /// Format 3's goldens are chains: a full and two incrementals (page deltas of changed
    /// databases; files added, removed, changed in mode only), and an encrypted full and
    /// incremental. Each listing.json names its chain, the full first, each link on the one before.
    func testTheFormatThreeChainsAreAllThere() throws {
        let chains = try Self.goldenArchives().filter { $0.format == 3 }
        XCTAssertEqual(Set(chains.map(\.kind)), ["chain", "encrypted-chain"])
        for golden in chains {
            XCTAssertGreaterThanOrEqual(golden.chain.count, golden.password == nil ? 3 : 2, golden.label)
            let kinds = ["full"] + Array(repeating: "incremental", count: golden.chain.count - 1)
            XCTAssertEqual(golden.chain.map(\.kind), kinds, golden.label)
            XCTAssertEqual(golden.chain.map(\.base), [nil] + golden.chain.dropLast().map(\.archive), golden.label)
            XCTAssertEqual(golden.chain.last?.archive, golden.archiveName, golden.label)
            // Every archive of the folder is a backup of the chain.
            let zips = try FileManager.default.contentsOfDirectory(atPath: golden.folder).filter { $0.hasSuffix(".zip") }
            XCTAssertEqual(Set(zips), Set(golden.archiveNames), golden.label)
        }
    }

    /// Format 4's goldens: a plain and an encrypted backup of a store with a database of
    /// several blocks, whose manifest gives each block its SHA-256 (one per listed block).
    func testTheFormatFourArchivesAreAllThere() throws {
        let archives = try Self.goldenArchives().filter { $0.format == 4 }
        XCTAssertEqual(Set(archives.map(\.kind)), ["blocks", "encrypted-blocks"])
        for golden in archives {
            let passwords = try golden.password.map { PasswordProvider.fixed(try BackupPassword($0)) }
            let reader = try ArchiveReader(
                path: golden.folder + "/" + golden.archiveName, backupName: golden.archiveName, passwords: passwords)
            let row = try XCTUnwrap(reader.manifest?.files.first { $0.path == "App.sqlite" }, golden.label)
            XCTAssertGreaterThan(row.deflateBlocks?.count ?? 0, 1, golden.label)
            XCTAssertEqual(row.deflateBlockHashes?.count, row.deflateBlocks?.count, golden.label)
            XCTAssertEqual(reader.manifest?.format, 4, golden.label)
        }
    }

    func testEveryGoldenArchiveVerifiesAndRestoresAsItsListingSays() throws {
        let archives = try Self.goldenArchives().filter(\.chain.isEmpty)
        XCTAssertFalse(archives.isEmpty, "no golden archives under \(Self.goldenFolder)")
        for golden in archives {
            try checkRestore(golden)
        }
    }

    /// Every backup of every golden chain, the newest incremental included, verifies (its
    /// whole chain, link by link) and restores to exactly the tree the store had when it was
    /// made: contents, databases' rows, modes and times, as for the single archives.
    func testEveryBackupOfAGoldenChainVerifiesAndRestoresAsItsListingSays() throws {
        let chains = try Self.goldenArchives().filter { !$0.chain.isEmpty }
        XCTAssertFalse(chains.isEmpty, "no golden chains under \(Self.goldenFolder)")
        for golden in chains {
            try checkRestore(golden)
        }
    }

    /// `ls` of a golden incremental lists its whole tree, each file naming the backup of the
    /// chain whose archive holds its content (the full for one unchanged since, none for one
    /// in this backup), as make_golden.py worked out from the trees it listed.
    func testLsOfAGoldenIncrementalSaysWhichBackupHoldsEachFile() throws {
        for golden in try Self.goldenArchives() where !golden.chain.isEmpty {
            let (backups, passwordArguments) = try copyToDestination(golden)
            for link in golden.chain where link.kind == "incremental" {
                let listed = try runStoreBackup(["ls", link.archive, "--from", backups, "--json"] + passwordArguments)
                XCTAssertEqual(listed.status, 0, "\(golden.label) \(link.archive): \(listed.stderr)")
                guard listed.status == 0 else { continue }
                let json = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as! [String: Any]
                let found = Dictionary(
                    uniqueKeysWithValues: (json["entries"] as! [[String: Any]]).map { ($0["path"] as! String, $0["in"] as? String) })
                XCTAssertEqual(found, link.holders.filter { $0.key != "." }, "\(golden.label) \(link.archive)")
                XCTAssertTrue(link.holders.values.contains { $0 != nil }, "\(golden.label) \(link.archive): nothing from its base")
            }
        }
    }

    /// A golden archive's manifest declares the format of its folder; a chain's, its kind,
    /// its base and its place in the chain.
    func testGoldenManifestsDeclareTheirFormat() throws {
        for golden in try Self.goldenArchives() {
            let passwords = try golden.password.map { PasswordProvider.fixed(try BackupPassword($0)) }
            if golden.chain.isEmpty {
                guard passwords == nil else { continue }
                let reader = try ArchiveReader(path: golden.folder + "/" + golden.archiveName, backupName: golden.archiveName)
                XCTAssertEqual(reader.manifest?.format, golden.format, golden.label)
            }
            for (index, link) in golden.chain.enumerated() {
                let reader = try ArchiveReader(path: golden.folder + "/" + link.archive, backupName: link.archive, passwords: passwords)
                let manifest = try XCTUnwrap(reader.manifest, "\(golden.label) \(link.archive)")
                XCTAssertEqual(manifest.format, golden.format, "\(golden.label) \(link.archive)")
                XCTAssertEqual(manifest.kind, link.kind, "\(golden.label) \(link.archive)")
                XCTAssertEqual(manifest.base?.name, link.base, "\(golden.label) \(link.archive)")
                XCTAssertEqual(manifest.chainLength, index, "\(golden.label) \(link.archive)")
                XCTAssertEqual(manifest.hashSalt != nil, golden.password != nil, "\(golden.label) \(link.archive)")
            }
        }
    }

    /// Copies the golden's archives (a chain's every backup) to a fresh destination folder;
    /// returns it and the arguments giving its password, if any.
    private func copyToDestination(_ golden: Golden) throws -> (backups: String, passwordArguments: [String]) {
        let folder = work + "/\(golden.format)-\(golden.kind)"
        let backups = folder + "/backups"
        guard !FileManager.default.fileExists(atPath: backups) else {
            return (backups, golden.password == nil ? [] : ["--password-file", folder + "/password"])
        }
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        for name in golden.archiveNames {
            try FileManager.default.copyItem(atPath: golden.folder + "/" + name, toPath: backups + "/" + name)
        }
        guard let password = golden.password else { return (backups, []) }
        FileManager.default.createFile(
            atPath: folder + "/password", contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600])
        return (backups, ["--password-file", folder + "/password"])
    }

    /// Verifies and restores the golden archive (each backup of a chain) and compares the
    /// restored tree with its listing.
    private func checkRestore(_ golden: Golden, file: StaticString = #filePath, line: UInt = #line) throws {
        let (backups, passwordArguments) = try copyToDestination(golden)
        // A single archive is compared with the listing's `tree`; a chain's backup, with its own.
        let checked: [(archive: String, chainArgument: [String])] =
            golden.chain.isEmpty ? [(golden.archiveName, [])] : golden.chain.map { ($0.archive, [$0.archive]) }
        for (index, (archive, chainArgument)) in checked.enumerated() {
            let label = golden.chain.isEmpty ? golden.label : "\(golden.label) \(archive)"
            let verified = try runStoreBackup(["verify", archive, "--from", backups] + passwordArguments + golden.options)
            XCTAssertEqual(verified.status, 0, "\(label): verify: \(verified.stdout) \(verified.stderr)", file: file, line: line)

            let stores = work + "/\(golden.format)-\(golden.kind)/Restored-\(index)/Stores"
            let restored = try runStoreBackup(
                ["restore", archive, stores, "--from", backups, "--yes"] + passwordArguments + golden.options)
            XCTAssertEqual(restored.status, 0, "\(label): restore: \(restored.stderr)", file: file, line: line)
            guard restored.status == 0 else { continue }

            let compared = try runTool(
                "/usr/bin/env",
                [
                    "python3", Self.goldenFolder + "/tree_listing.py", "--compare",
                    golden.folder + "/listing.json", stores,
                ] + chainArgument)
            XCTAssertEqual(
                compared.status, 0, "\(label) restored differently:\n\(compared.stdout)\(compared.stderr)", file: file, line: line)
        }
    }
}
