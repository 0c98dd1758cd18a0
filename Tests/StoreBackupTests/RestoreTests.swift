import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance: restore succeeds, rolls back a store that fails to reload, refuses
/// damaged or escaping archives without touching the live store, and survives kill -9
/// at every step of the swap.
final class RestoreTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("restore")
        try StoreFixture.make(at: store)
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        // Change the live store so "old" and "restored" can be told apart.
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
        try settings.execute("UPDATE kv SET v='light' WHERE k='theme'", operation: "change")
        settings.close()
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private var liveTheme: String { (try? StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv")) ?? "missing" }

    func testRestoreReplacesTheStoreAndCleansUp() throws {
        let result = try runStoreBackup(["restore", "latest", store, "--from", backups, "--yes"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(liveTheme, "dark")
        XCTAssertEqual(try String(contentsOfFile: store + "/notes.txt", encoding: .utf8), "grocery list\n")
        assertNoLeftovers()
    }

    func testReloadFailureRollsBackToTheOldStore() async throws {
        let before = try StoreFixture.describe(store)
        let calls = CallLog()
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let hooks = ReloadHooks(
            reload: { directory in
                let theme = try StoreFixture.query(directory + "/Settings.sqlite", "SELECT v FROM kv")
                calls.append(theme)
                if theme == "dark" { throw StoreBackupError.restoreRefused(reason: "app rejected the restored store") }
            },
            didRollback: { _ in calls.append("didRollback") })
        do {
            _ = try await helper.restore("latest", hooks: hooks)
            XCTFail("restore should have failed")
        } catch StoreBackupError.reloadFailed(_, let rolledBack) {
            XCTAssertTrue(rolledBack)
        }
        XCTAssertEqual(calls.entries, ["dark", "light", "didRollback"], "reload on the new store, then again on the old one")
        XCTAssertEqual(try StoreFixture.describe(store), before, "the old store must be live again, unchanged")
        let failed = StoreLayout(storesDirectory: store).failed
        XCTAssertEqual(
            try StoreFixture.query(failed + "/Settings.sqlite", "SELECT v FROM kv"), "dark",
            "the rejected store is kept in _FailedRestore")
        XCTAssertFalse(FileSystem.fileExists(StoreLayout(storesDirectory: store).old))
        XCTAssertFalse(FileSystem.fileExists(StoreLayout(storesDirectory: store).journal))
    }

    func testCorruptArchiveIsRefusedAndStoreUntouched() throws {
        let damaged = try copyBackup(named: "2000-01-01 000000 Stores.zip")
        try flipByteInsideEntry(archive: damaged, entry: "App.sqlite")
        try assertRestoreFails(name: "2000-01-01 000000 Stores.zip", messageContains: "damaged")
    }

    func testTruncatedArchiveIsRefusedAndStoreUntouched() throws {
        let damaged = try copyBackup(named: "2000-01-01 000000 Stores.zip")
        let size = try FileSystem.lstatInfo(damaged).st_size
        XCTAssertEqual(truncate(damaged, size / 2), 0)
        try assertRestoreFails(name: "2000-01-01 000000 Stores.zip", messageContains: "damaged")
    }

    func testManifestChecksumMismatchIsRefused() throws {
        let original = try onlyBackup(in: backups)
        let forged = backups + "/2000-01-01 000000 Stores.zip"
        // Same manifest, one file's content replaced: every CRC is valid, the SHA-256 is not.
        try runPythonScript(
            """
            import sys, zipfile
            src = zipfile.ZipFile(sys.argv[1]); dst = zipfile.ZipFile(sys.argv[2], "w")
            for info in src.infolist():
                data = src.read(info)
                if info.filename == "notes.txt": data = b"forged content"
                dst.writestr(info, data)
            dst.close()
            """, [original, forged])
        try assertRestoreFails(name: "2000-01-01 000000 Stores.zip", messageContains: "notes.txt")
    }

    /// A database big enough to be unpacked in blocks has its SHA-256 checked by reading it
    /// back after its CRC (DeferredDigest): a manifest whose digest for it is wrong, with
    /// every CRC and every database page valid, is still refused.
    func testDatabaseUnpackedInBlocksIsCheckedAgainstTheManifestDigest() throws {
        try growPastOneBlock(store + "/App.sqlite")
        let forged = try backupWithForgedDigest(of: "App.sqlite")
        try assertRestoreFails(name: (forged as NSString).lastPathComponent, messageContains: "App.sqlite does not match")
    }

    /// With at most one database waiting for its read-back digest (each keeps its file open),
    /// every database is still checked: a whole backup unpacks, a forged digest is caught.
    func testDigestsAreCheckedWhenTheirLimitIsReached() throws {
        try growPastOneBlock(store + "/App.sqlite")
        try growPastOneBlock(store + "/Settings.sqlite")
        let forged = try backupWithForgedDigest(of: "Settings.sqlite")
        let whole = try onlyBackup(in: work + "/grown-backups")
        for (archive, scratch) in [(whole, work + "/whole"), (forged, work + "/forged")] {
            var unpacking = RestoreUnpacking(
                reader: try ArchiveReader(path: archive, backupName: "test"), options: ExtractionOptions(),
                cancel: CancellationFlag(), progress: ProgressThrottle(nil))
            unpacking.pendingDigestLimit = 1
            if archive == whole {
                XCTAssertEqual(try unpacking.unpack(into: scratch).sorted(), ["App.sqlite", "Settings.sqlite"])
                continue
            }
            XCTAssertThrowsError(try unpacking.unpack(into: scratch)) { error in
                guard case StoreBackupError.checksumMismatch(_, let entry) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(entry, "Settings.sqlite")
            }
        }
    }

    /// Adds about 2 MiB of compressible rows: enough for several deflate blocks.
    private func growPastOneBlock(_ database: String) throws {
        let connection = try SQLiteConnection(path: database, mode: .readWrite)
        defer { connection.close() }
        try connection.execute(
            """
            CREATE TABLE filler(b TEXT);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2048)
            INSERT INTO filler SELECT hex(randomblob(1024)) FROM n;
            """, operation: "grow past one block")
    }

    /// Backs the store up into `grown-backups`, then copies that backup into `backups` under
    /// an older name with the manifest's SHA-256 of `path` changed. Returns the copy's path.
    private func backupWithForgedDigest(of path: String) throws -> String {
        let grown = work + "/grown-backups"
        let created = try runStoreBackup(["create", store, "--to", grown])
        XCTAssertEqual(created.status, 0, created.stderr)
        let forged = backups + "/2000-01-01 000000 Stores.zip"
        try FileManager.default.copyItem(atPath: try onlyBackup(in: grown), toPath: forged)
        let manifest = try runTool(
            "/usr/bin/env",
            [
                "python3", "-c",
                """
                import json, sys, zipfile
                path, entry = sys.argv[1], sys.argv[2]
                manifest = json.loads(zipfile.ZipFile(path).read(".storebackup/manifest.json"))
                row = next(f for f in manifest["files"] if f["path"] == entry)
                assert len(row.get("deflateBlocks") or []) >= 2, entry + " must be unpacked in blocks"
                row["sha256"] = row["sha256"][:-1] + ("0" if row["sha256"][-1] != "0" else "1")
                print(json.dumps(manifest))
                """, forged, path,
            ])
        XCTAssertEqual(manifest.status, 0, manifest.stderr)
        try replaceZipEntry(forged, entry: ".storebackup/manifest.json", content: manifest.stdout)
        return forged
    }

    func testEscapingPathIsRefused() throws {
        for (index, entry) in ["../evil.txt", "/tmp/storebackup-evil.txt", "a/../../evil.txt"].enumerated() {
            let name = "2000-01-0\(index + 1) 000000 Stores.zip"
            try runPythonScript(
                """
                import sys, zipfile
                z = zipfile.ZipFile(sys.argv[1], "w")
                z.writestr("notes.txt", b"fine")
                info = zipfile.ZipInfo(sys.argv[2]); z.writestr(info, b"escaped")
                z.close()
                """, [backups + "/" + name, entry])
            try assertRestoreFails(name: name, messageContains: "unsafe path")
            XCTAssertFalse(FileSystem.fileExists(work + "/evil.txt"))
            XCTAssertFalse(FileSystem.fileExists("/tmp/storebackup-evil.txt"))
        }
    }

    func testSymlinkPointingOutsideIsRefused() throws {
        let name = "2000-01-01 000000 Stores.zip"
        try runPythonScript(
            """
            import sys, zipfile
            z = zipfile.ZipFile(sys.argv[1], "w")
            info = zipfile.ZipInfo("data/link"); info.create_system = 3; info.external_attr = 0o120777 << 16
            z.writestr(info, b"../../outside")
            z.close()
            """, [backups + "/" + name])
        try assertRestoreFails(name: name, messageContains: "unsafe path")
    }

    func testRestoreWithoutTerminalNeedsYes() throws {
        let before = try StoreFixture.describe(store)
        let result = try runStoreBackup(["restore", "latest", store, "--from", backups])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("--yes"), result.stderr)
        XCTAssertEqual(try StoreFixture.describe(store), before)
    }

    /// Kill -9 at each step; recovery must give a whole store, old or new, never missing or mixed.
    func testKillAtEachStepThenRecoverGivesAWholeStore() throws {
        let expectations: [(step: String, theme: String, environment: [String: String])] = [
            ("extracting", "light", [:]),
            ("before-swap", "light", [:]),
            ("between-renames", "light", [:]),
            ("before-reload", "light", [:]),
            ("before-cleanup", "dark", [:]),
            ("during-rollback", "light", ["STOREBACKUP_TEST_FAIL_RELOAD": "1"]),
        ]
        let oldTree = try StoreFixture.describe(store, includeJournals: false)
        for expectation in expectations {
            var environment = expectation.environment
            environment["STOREBACKUP_TEST_PAUSE_AT"] = expectation.step
            let restore = try BackgroundCommand(["restore", "latest", store, "--from", backups, "--yes"], environment: environment)
            XCTAssertTrue(
                restore.waitForLine(containing: "test pause at \(expectation.step)"),
                "\(expectation.step): never reached; stderr: \(restore.stderrSoFar)")
            restore.kill9()

            let recovered = try runStoreBackup(["recover", store])
            XCTAssertEqual(recovered.status, 0, recovered.stderr)
            XCTAssertEqual(liveTheme, expectation.theme, "after a kill at \(expectation.step)")
            XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
            if expectation.theme == "light" {
                XCTAssertEqual(
                    try StoreFixture.describe(store, includeJournals: false), oldTree, "\(expectation.step): the old store, exactly")
            } else {
                XCTAssertEqual(try String(contentsOfFile: store + "/notes.txt", encoding: .utf8), "grocery list\n")
            }
            assertNoLeftovers(allowFailedRestore: true)
            if expectation.theme == "dark" {
                // Put the changed store back for the next step.
                try FileSystem.removeTree(store)
                try FileSystem.rename(from: work + "/saved", to: store)
            } else {
                try? FileSystem.removeTree(StoreLayout(storesDirectory: store).failed)
            }
            if expectation.step == "before-reload" {
                // Keep a copy of the old store to restore after the next (forward) case.
                let copy = try runCopy(store, work + "/saved")
                XCTAssertEqual(copy, 0)
            }
        }
    }

    /// Any later command on the store repairs it first, without `recover`.
    func testNextCommandRecoversAutomatically() throws {
        let restore = try BackgroundCommand(
            ["restore", "latest", store, "--from", backups, "--yes"],
            environment: ["STOREBACKUP_TEST_PAUSE_AT": "between-renames"])
        XCTAssertTrue(restore.waitForLine(containing: "test pause at between-renames"))
        restore.kill9()
        XCTAssertFalse(FileSystem.fileExists(store), "mid-swap the live folder is briefly absent")
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        XCTAssertTrue(created.stderr.contains("rolled back"), created.stderr)
        XCTAssertEqual(liveTheme, "light")
    }

    // MARK: helpers

    private func assertRestoreFails(name: String, messageContains text: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let before = try StoreFixture.describe(store)
        let result = try runStoreBackup(["restore", name, store, "--from", backups, "--yes"])
        XCTAssertNotEqual(result.status, 0, file: file, line: line)
        XCTAssertTrue(result.stderr.contains(text), "stderr: \(result.stderr)", file: file, line: line)
        XCTAssertEqual(result.stderr.split(separator: "\n").filter { $0.contains("error") }.count, 1, result.stderr, file: file, line: line)
        XCTAssertEqual(try StoreFixture.describe(store), before, "the live store must be byte-identical", file: file, line: line)
        assertNoLeftovers(file: file, line: line)
    }

    private func assertNoLeftovers(allowFailedRestore: Bool = false, file: StaticString = #filePath, line: UInt = #line) {
        let layout = StoreLayout(storesDirectory: store)
        XCTAssertFalse(FileSystem.fileExists(layout.new), "no _New left", file: file, line: line)
        XCTAssertFalse(FileSystem.fileExists(layout.old), "no _Old left", file: file, line: line)
        XCTAssertFalse(FileSystem.fileExists(layout.journal), "no journal left", file: file, line: line)
        if !allowFailedRestore { XCTAssertFalse(FileSystem.fileExists(layout.failed), file: file, line: line) }
    }

    private func copyBackup(named name: String) throws -> String {
        let target = backups + "/" + name
        try FileManager.default.copyItem(atPath: try onlyBackup(in: backups), toPath: target)
        return target
    }

    private func flipByteInsideEntry(archive: String, entry: String) throws {
        try runPythonScript(
            """
            import sys, zipfile, struct
            path, name = sys.argv[1], sys.argv[2]
            info = zipfile.ZipFile(path).getinfo(name)
            with open(path, "r+b") as f:
                f.seek(info.header_offset)
                header = f.read(30)
                name_len, extra_len = struct.unpack("<HH", header[26:30])
                data_start = info.header_offset + 30 + name_len + extra_len
                f.seek(data_start + info.compress_size // 2)
                byte = f.read(1)
                f.seek(data_start + info.compress_size // 2)
                f.write(bytes([byte[0] ^ 0xFF]))
            """, [archive, entry])
    }

    private func runCopy(_ source: String, _ target: String) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/cp")
        process.arguments = ["-a", source, target]
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}

/// Records hook calls from any thread.
final class CallLog: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [String] = []
    func append(_ entry: String) { lock.withLock { list.append(entry) } }
    var entries: [String] { lock.withLock { list } }
}
