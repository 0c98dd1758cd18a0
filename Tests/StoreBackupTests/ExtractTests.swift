import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance for issue 17 point 4: `extract` writes some files of a backup into a new
/// folder with every check restore makes, without touching or locking the live store, and
/// `ls` lists a backup's contents from its manifest; through the command line against a
/// local folder and each remote kind (S3, WebDAV, SFTP, the Dropbox emulator).
final class ExtractTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("extract")
        try StoreFixture.make(at: store, logRows: 200, blobCount: 4)
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// TMPDIR inside the test's folder, so any temporary left there is seen.
    var baseEnvironment: [String: String] { ["HOME": work, "TMPDIR": work + "/tmp"] }

    // MARK: local

    func testExtractOneBlobAFolderAndEverythingLeavesTheStoreUntouched() throws {
        let name = try createBackup(to: [backups])
        let before = try StoreFixture.describe(store)
        let besideBefore = try FileManager.default.contentsOfDirectory(atPath: work)
        let original = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let blob = try firstBlob(in: [backups])
        // A temporary of an extract killed earlier beside the target: swept by the next one.
        let dead = Process()
        dead.executableURL = URL(fileURLWithPath: "/bin/true")
        try dead.run()
        dead.waitUntilExit()
        let killed = work + "/.storebackup-tmp-\(dead.processIdentifier)-extract-0123456789abc"
        try FileManager.default.createDirectory(atPath: killed + "/half", withIntermediateDirectories: true)

        // One blob: only it and the folders on its way, with their own modes and times.
        let one = work + "/one"
        let single = try extract(["latest", blob, "--into", one, "--from", backups])
        XCTAssertTrue(single.stderr.contains("extracted 3 entries") && single.stderr.contains(name), single.stderr)
        let extracted = try StoreFixture.describe(one)
        XCTAssertEqual(extracted.keys.sorted(), [".App_SUPPORT", ".App_SUPPORT/_EXTERNAL_DATA", blob])
        XCTAssertFalse(FileSystem.fileExists(killed), "the dead extract's temporary is swept")
        for path in extracted.keys { XCTAssertEqual(extracted[path], original[path], path) }

        // A folder (trailing slash and ./ accepted): everything beneath it, nothing else.
        let folder = work + "/folder"
        try extract(["latest", "./.App_SUPPORT/", "--into", folder, "--from", backups])
        let inFolder = original.filter { $0.key.hasPrefix(".App_SUPPORT") }
        XCTAssertEqual(try StoreFixture.describe(folder), inFolder)
        XCTAssertEqual(inFolder.count, 6, "the folder, _EXTERNAL_DATA and 4 blobs")

        // Everything: the whole tree, as restore would make it.
        let all = work + "/all"
        try extract([name, "--into", all, "--from", backups])
        XCTAssertEqual(try StoreFixture.describe(all, includeJournals: false, includeDatabaseContent: false), original)
        XCTAssertEqual(try StoreFixture.query(all + "/Settings.sqlite", "SELECT v FROM kv WHERE k='theme'"), "dark")

        // The live store byte-identical; no lock file or temporary made by extract.
        XCTAssertEqual(try StoreFixture.describe(store), before)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work).sorted(), (besideBefore + ["all", "folder", "one"]).sorted(),
            "nothing beside the targets: no temporary, no lock file")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/tmp"), [])
    }

    /// A database comes out as the snapshot in the backup: it passes integrity_check, its bytes
    /// are the manifest's, and it holds what the store held then, not what was written since.
    func testDatabaseComesOutAsTheConsistentSnapshot() throws {
        try createBackup(to: [backups])
        let live = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try live.execute("INSERT INTO log(note) VALUES('after the backup')", operation: "test change")
        live.close()
        let listing = try lsJSON(["latest", "App.sqlite", "--from", backups])
        let row = try XCTUnwrap((listing["entries"] as? [[String: Any]])?.first)
        XCTAssertEqual(row["type"] as? String, "database")

        let out = work + "/db"
        let result = try extract(["latest", "App.sqlite", "--into", out, "--from", backups])
        XCTAssertTrue(result.stderr.contains("1 databases checked"), result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), ["App.sqlite"], "no -wal or -shm: a whole snapshot")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: out + "/App.sqlite"))
        XCTAssertEqual(SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined(), row["sha256"] as? String)
        XCTAssertEqual(Int64(bytes.count), (row["size"] as? NSNumber)?.int64Value)
        XCTAssertEqual(try StoreFixture.query(out + "/App.sqlite", "PRAGMA integrity_check"), "ok")
        XCTAssertEqual(try StoreFixture.query(out + "/App.sqlite", "SELECT count(*) FROM log"), "200")
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "SELECT count(*) FROM log"), "201")
    }

    func testLsListsTheManifestInAlignedColumnsAndAsJSON() throws {
        let name = try createBackup(to: [backups])
        let expected = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)

        let text = try runStoreBackup(["ls", "latest", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(text.status, 0, text.stderr)
        let lines = text.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, expected.count, text.stdout)
        XCTAssertTrue(text.stderr.contains("\(expected.count) entries") && text.stderr.contains(name), text.stderr)
        // Aligned: the time column starts at the same place on every line.
        let dateColumns = Set(
            lines.compactMap { line in
                line.range(of: #"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"#, options: .regularExpression)
                    .map { line.distance(from: line.startIndex, to: $0.lowerBound) }
            })
        XCTAssertEqual(dateColumns.count, 1, text.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("-rw") && $0.hasSuffix("  App.sqlite  (database)") }, text.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("lrwxrwxrwx") && $0.hasSuffix("notes-link -> notes.txt") }, text.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("drwxr-x---") && $0.hasSuffix("  Caches/Empty/") }, text.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("-rw-------") && $0.hasSuffix("  .secret-config") }, text.stdout)

        let json = try lsJSON([name, "--from", backups])
        XCTAssertEqual(Set(json.keys), ["backup", "manifest", "created", "host", "storesDirectory", "entries"])
        XCTAssertEqual(json["backup"] as? String, name)
        XCTAssertEqual(json["manifest"] as? Bool, true)
        XCTAssertEqual(json["storesDirectory"] as? String, store)
        let entries = try XCTUnwrap(json["entries"] as? [[String: Any]])
        XCTAssertEqual(entries.map { $0["path"] as? String }, expected.keys.sorted().map { Optional($0) })
        for entry in entries {
            XCTAssertEqual(Set(entry.keys), ["path", "type", "size", "mode", "modified", "linkTarget", "sha256", "in"], "\(entry)")
            let path = try XCTUnwrap(entry["path"] as? String)
            let info = try FileSystem.lstatInfo(store + "/" + path)
            XCTAssertEqual(entry["mode"] as? String, String(format: "0%o", UInt32(info.st_mode) & 0o777), path)
            if entry["type"] as? String == "file" {
                XCTAssertEqual((entry["size"] as? NSNumber)?.int64Value, Int64(info.st_size), path)
                XCTAssertEqual(
                    entry["modified"] as? String,
                    ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec))), path)
            }
        }
        XCTAssertEqual(entries.first { $0["path"] as? String == "notes-link" }?["linkTarget"] as? String, "notes.txt")
        XCTAssertTrue(entries.first { $0["path"] as? String == "Caches" }?["linkTarget"] is NSNull)

        // A folder filters to it and what is beneath it; an unknown path is one error line.
        let filtered = try lsJSON(["latest", "Caches", "--from", backups])
        XCTAssertEqual((filtered["entries"] as? [[String: Any]])?.compactMap { $0["path"] as? String }, ["Caches", "Caches/Empty"])
        let unknown = try runStoreBackup(["ls", "latest", "Cache", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(unknown.status, 1)
        XCTAssertEqual(
            errorLines(unknown.stderr),
            ["storebackup: error: backup \"\(name)\" holds nothing at \"Cache\" (see: storebackup ls \"\(name)\"); nothing was written"])
        XCTAssertEqual(unknown.stdout, "")
    }

    func testUnknownPathsAndUnusableTargetsWriteNothing() throws {
        try createBackup(to: [backups])
        let before = try FileManager.default.contentsOfDirectory(atPath: work).sorted()

        let out = work + "/out"
        let unknown = try runStoreBackup(
            ["extract", "latest", "notes.txt", "no/such", "--into", out, "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(unknown.status, 1)
        XCTAssertEqual(errorLines(unknown.stderr).count, 1, unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("holds nothing at \"no/such\"") && !unknown.stderr.contains("\"notes.txt\""), unknown.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work).sorted(), before, "no folder, no temporary")

        // A folder that holds something, and a file, are refused and left as they were.
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: out + "/keep.txt"))
        let plainFile = work + "/plain"
        try Data("plain\n".utf8).write(to: URL(fileURLWithPath: plainFile))
        for target in [out, plainFile] {
            let refused = try runStoreBackup(["extract", "latest", "--into", target, "--from", backups], environment: baseEnvironment)
            XCTAssertEqual(refused.status, 1)
            XCTAssertEqual(errorLines(refused.stderr).count, 1, refused.stderr)
            XCTAssertTrue(
                refused.stderr.contains(
                    "\(target) already exists and is not an empty folder; extract writes only into a new folder (nothing was written)"),
                refused.stderr)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), ["keep.txt"])
        XCTAssertEqual(try String(contentsOfFile: plainFile, encoding: .utf8), "plain\n")

        // A missing parent is not created.
        let deep = try runStoreBackup(["extract", "latest", "--into", work + "/a/b", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(deep.status, 1)
        XCTAssertTrue(deep.stderr.contains("is not an existing folder"), deep.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/a"))

        // An empty folder is fine.
        let empty = work + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        try extract(["latest", "notes.txt", "--into", empty, "--from", backups])
        XCTAssertEqual(try String(contentsOfFile: empty + "/notes.txt", encoding: .utf8), "grocery list\n")
    }

    /// extract neither takes nor needs the store's lock: it runs while a restore holds it,
    /// and through the library with a stores directory that does not exist (creating nothing there).
    func testExtractWorksWhileTheStoreIsLockedAndWithoutAStore() async throws {
        try createBackup(to: [backups])
        let before = try StoreFixture.describe(store)
        let lock = try StoreLock(storesDirectory: store, purpose: "restore")
        let blocked = try runStoreBackup(["restore", "latest", store, "--yes", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(blocked.status, 1)
        XCTAssertTrue(blocked.stderr.contains("is in use by another backup, restore or recovery"), blocked.stderr)

        try extract(["latest", "--into", work + "/while-locked", "--from", backups])
        let listed = try runStoreBackup(["ls", "latest", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertEqual(try StoreFixture.describe(store), before)
        withExtendedLifetime(lock) {}

        let nowhere = work + "/nowhere/Stores"
        let helper = StoreHelper(storesDirectory: nowhere, destination: LocalFolderDestination(folder: backups))
        let result = try await helper.repository.extract("latest", paths: ["notes.txt", "Caches/"], into: work + "/library")
        XCTAssertEqual(result.entryCount, 3)
        XCTAssertEqual(result.byteCount, 13)
        XCTAssertEqual(result.databasesChecked, [])
        XCTAssertEqual(try StoreFixture.describe(work + "/library").keys.sorted(), ["Caches", "Caches/Empty", "notes.txt"])
        let contents = try await helper.repository.contents(of: "latest", matching: ["notes.txt"])
        XCTAssertEqual(contents.entries.map(\.path), ["notes.txt"])
        XCTAssertEqual(
            contents.entries.first?.sha256, SHA256.hash(data: Data("grocery list\n".utf8)).map { String(format: "%02x", $0) }.joined())
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/nowhere"), "no store, lock file or folder made")
        do {
            _ = try await helper.repository.extract("latest", paths: ["ghost"], into: work + "/ghost")
            XCTFail("an unknown path must be refused")
        } catch let error as StoreBackupError {
            XCTAssertEqual(error, .notInBackup(name: result.backupName, paths: ["ghost"]))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/ghost"))
    }

    func testEncryptedBackupNeedsItsPassword() throws {
        let environment = baseEnvironment.merging(["STOREBACKUP_PASSWORD": "correct horse battery"]) { _, new in new }
        let created = try runStoreBackup(["create", store, "--to", backups, "--encrypt"], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let without = try runStoreBackup(
            ["extract", "latest", "notes.txt", "--into", work + "/out", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(without.status, 1)
        XCTAssertTrue(without.stderr.contains("is encrypted"), without.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/out"))
        let with = try runStoreBackup(
            ["extract", "latest", "notes.txt", "App.sqlite", "--into", work + "/out", "--from", backups], environment: environment)
        XCTAssertEqual(with.status, 0, with.stderr)
        XCTAssertEqual(try String(contentsOfFile: work + "/out/notes.txt", encoding: .utf8), "grocery list\n")
        XCTAssertEqual(try StoreFixture.query(work + "/out/App.sqlite", "PRAGMA integrity_check"), "ok")
        let listed = try runStoreBackup(["ls", "latest", "--from", backups], environment: environment)
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertTrue(listed.stdout.contains("notes.txt"), listed.stdout)
    }

    // MARK: hostile archives

    /// A sample of the hand-built hostile archives (Tests/Support/hostile_archives.py), each
    /// through extract: one error line, nothing written anywhere (no target, no temporary,
    /// nothing outside), the live store untouched, memory within the budget. Those whose lie
    /// is in the archive's names, links or manifest are refused even when only an innocent
    /// file is asked for: the whole archive is checked before anything is written.
    func testHostileArchivesAreRefused() throws {
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        // (slip-backslash is a legal name since issue 32: see HostileArchiveTests.legalNow.)
        let whole = [
            "slip-dotdot", "slip-absolute", "name-nul", "name-escape", "name-too-long",
            "link-outside", "link-chain", "link-parent-is-link", "file-beneath-link", "link-loop",
            "duplicate-name", "lying-size", "expansion-bomb", "sizes-disagree", "huge-declared-size",
            "overlapping-entries", "huge-manifest", "huge-entry-count", "huge-central-directory",
            "manifest-wrong-sha", "manifest-missing-entry", "manifest-extra-entry", "manifest-wrong-type",
            "manifest-more-rows-than-entries", "manifest-wrong-link-target", "no-manifest",
        ]
        let metadataOnly: Set = [
            "slip-dotdot", "link-chain", "link-outside", "file-beneath-link", "duplicate-name", "sizes-disagree",
            "manifest-missing-entry", "manifest-extra-entry", "manifest-wrong-type",
            "no-manifest", "huge-entry-count",
        ]
        let storeBefore = try StoreFixture.describe(store)
        for (number, label) in whole.enumerated() {
            let name = String(format: "2000-01-01 %06d Stores.zip", number)
            let built = try runTool("/usr/bin/env", ["python3", HostileArchiveTests.builder, "build", label, backups + "/" + name])
            XCTAssertEqual(built.status, 0, built.stderr)
            try assertExtractRefused(name, label: label, paths: [])
            if metadataOnly.contains(label) { try assertExtractRefused(name, label: label + " (one file)", paths: ["notes.txt"]) }
            try FileManager.default.removeItem(atPath: backups + "/" + name)
        }
        XCTAssertEqual(try StoreFixture.describe(store), storeBefore)

        // Without a manifest, --allow-unverified lets it through and says what was not checked.
        let name = "2000-01-01 000000 Stores.zip"
        let built = try runTool("/usr/bin/env", ["python3", HostileArchiveTests.builder, "build", "no-manifest", backups + "/" + name])
        XCTAssertEqual(built.status, 0, built.stderr)
        let allowed = try runStoreBackup(
            ["extract", name, "--into", work + "/unverified", "--from", backups, "--allow-unverified"],
            environment: baseEnvironment)
        XCTAssertEqual(allowed.status, 0, allowed.stderr)
        XCTAssertTrue(allowed.stderr.contains("storebackup: warning:") && allowed.stderr.contains("no manifest"), allowed.stderr)
        XCTAssertTrue(allowed.stderr.contains("1 databases checked"), allowed.stderr)
        XCTAssertEqual(try String(contentsOfFile: work + "/unverified/notes.txt", encoding: .utf8), "hello from the backup\n")
        let listed = try runStoreBackup(["ls", name, "--json", "--from", backups], environment: baseEnvironment)
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertTrue(listed.stderr.contains("has no manifest"), listed.stderr)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(object["manifest"] as? Bool, false)
        XCTAssertEqual((object["entries"] as? [[String: Any]])?.compactMap { $0["path"] as? String }, ["App.sqlite", "notes.txt"])
    }

    private func assertExtractRefused(
        _ name: String, label: String, paths: [String],
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let target = work + "/out"
        let before = try listing(of: work)
        let tmpBefore = try Set(FileManager.default.contentsOfDirectory(atPath: "/tmp").filter { $0.contains("storebackup-evil") })
        let (result, peak) = try runStoreBackupMeasuringPeakRSS(
            ["extract", name] + paths + ["--into", target, "--from", backups],
            environment: baseEnvironment)
        XCTAssertEqual(result.status, 1, "\(label): extract must fail", file: file, line: line)
        XCTAssertEqual(errorLines(result.stderr).count, 1, "\(label): \(result.stderr)", file: file, line: line)
        let other = result.stderr.split(separator: "\n").filter {
            !$0.hasPrefix("storebackup: error:") && !HostileArchiveTests.isProgress($0)
        }
        XCTAssertEqual(other, [], "\(label): nothing but progress and the error: \(result.stderr)", file: file, line: line)
        if let text = HostileArchiveTests.expectedMessages[String(label.prefix { $0 != " " })] {
            XCTAssertTrue(result.stderr.contains(text), "\(label): expected \"\(text)\" in: \(result.stderr)", file: file, line: line)
        }
        XCTAssertFalse(FileSystem.fileExists(target), "\(label): no target folder left", file: file, line: line)
        XCTAssertEqual(try listing(of: work), before, "\(label): nothing written beside it or anywhere else", file: file, line: line)
        let tmpAfter = try Set(FileManager.default.contentsOfDirectory(atPath: "/tmp").filter { $0.contains("storebackup-evil") })
        XCTAssertEqual(tmpAfter, tmpBefore, "\(label): nothing written to /tmp", file: file, line: line)
        XCTAssertLessThan(peak, HostileArchiveTests.budgetKiB, "\(label): peak RSS \(peak) KiB", file: file, line: line)
    }

    /// Every path under `root` except the live store and the backups.
    private func listing(of root: String) throws -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        var paths: [String] = []
        for case let relative as String in enumerator where !relative.hasPrefix("Stores/") && !relative.hasPrefix("backups/") {
            paths.append(relative)
        }
        return paths.sorted()
    }

    // MARK: remote destinations

    func testLsAndExtractFromS3() throws {
        let servers = try TestServers(label: "extract-s3")
        defer { servers.stop() }
        let s3 = try servers.start("s3")
        let environment = [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String,
        ]
        try assertRemoteRoundTrip(["--to", "s3://backups/extract", "--s3-endpoint", s3["endpoint"] as! String], environment: environment)
    }

    func testLsAndExtractFromWebDAV() throws {
        let servers = try TestServers(label: "extract-webdav")
        defer { servers.stop() }
        let server = try servers.start("webdav")
        let environment = [
            "STOREBACKUP_WEBDAV_USER": server["user"] as! String, "STOREBACKUP_WEBDAV_PASSWORD": server["password"] as! String,
        ]
        try assertRemoteRoundTrip(["--to", "webdav://127.0.0.1:\(server["port"] as! Int)/dav/extract"], environment: environment)
    }

    func testLsAndExtractFromSFTP() throws {
        let servers = try TestServers(label: "extract-sftp")
        defer { servers.stop() }
        let server = try servers.start("sftp")
        let url = "sftp://\(server["user"] as! String)@127.0.0.1:\(server["port"] as! Int)\(server["path"] as! String)/extract"
        try assertRemoteRoundTrip(
            ["--to", url, "--ssh-key", server["key"] as! String, "--known-hosts", server["known_hosts"] as! String],
            environment: [:])
    }

    func testLsAndExtractFromDropbox() throws {
        let emulator = try DropboxEmulatorClient(label: "extract-dropbox")
        defer { emulator.stop() }
        try assertRemoteRoundTrip(
            ["--to", "dropbox:///Extract"], environment: emulator.environment(home: work, token: emulator.accessToken))
    }

    /// create to the remote, then `ls` and `extract` of one blob and one database from it:
    /// the downloads leave no temporary behind (in TMPDIR or beside the target).
    private func assertRemoteRoundTrip(
        _ destination: [String], environment: [String: String],
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let environment = baseEnvironment.merging(environment) { _, new in new }
        let name = try createBackup(to: destination, environment: environment)
        let expected = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let listing = try lsJSON(["latest"] + destination, environment: environment)
        XCTAssertEqual(listing["backup"] as? String, name, file: file, line: line)
        XCTAssertEqual(
            (listing["entries"] as? [[String: Any]])?.compactMap { $0["path"] as? String }, expected.keys.sorted(), file: file, line: line)

        let blob = try firstBlob(in: destination, environment: environment)
        let out = work + "/remote-out"
        try extract([name, blob, "App.sqlite", "--into", out] + destination, environment: environment)
        XCTAssertEqual(
            try Data(contentsOf: URL(fileURLWithPath: out + "/" + blob)),
            try Data(contentsOf: URL(fileURLWithPath: store + "/" + blob)), file: file, line: line)
        XCTAssertEqual(try StoreFixture.query(out + "/App.sqlite", "PRAGMA integrity_check"), "ok", file: file, line: line)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work + "/tmp"), [], "ls's download removed", file: file, line: line)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix(".storebackup-tmp-") }, [],
            "extract's download removed", file: file, line: line)
    }

    // MARK: helpers

    @discardableResult
    private func createBackup(to destination: [String], environment: [String: String] = [:]) throws -> String {
        let arguments = destination.first?.hasPrefix("--") == true ? destination : ["--to"] + destination
        let created = try runStoreBackup(
            ["create", store] + arguments, environment: baseEnvironment.merging(environment) { _, new in new })
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `storebackup extract …`, which must succeed.
    @discardableResult
    private func extract(
        _ arguments: [String], environment: [String: String] = [:],
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> CommandResult {
        let result = try runStoreBackup(["extract"] + arguments, environment: baseEnvironment.merging(environment) { _, new in new })
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        XCTAssertEqual(errorLines(result.stderr), [], file: file, line: line)
        return result
    }

    private func lsJSON(
        _ arguments: [String], environment: [String: String] = [:],
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> [String: Any] {
        let result = try runStoreBackup(["ls", "--json"] + arguments, environment: baseEnvironment.merging(environment) { _, new in new })
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], file: file, line: line)
    }

    /// The first external blob the latest backup lists.
    private func firstBlob(in destination: [String], environment: [String: String] = [:]) throws -> String {
        let arguments = destination.first?.hasPrefix("--") == true ? destination : ["--from"] + destination
        let entries = try XCTUnwrap(
            try lsJSON(["latest", ".App_SUPPORT/_EXTERNAL_DATA"] + arguments, environment: environment)["entries"] as? [[String: Any]])
        return try XCTUnwrap(entries.first { $0["type"] as? String == "file" }?["path"] as? String)
    }

    private func errorLines(_ stderr: String) -> [String] {
        stderr.split(separator: "\n").map(String.init).filter { $0.hasPrefix("storebackup: error:") }
    }
}
