import Foundation
import XCTest

@testable import StoreBackup

/// Issue 51, first half: `restore --delta` builds the new store from the live one and the
/// backup. Over a live store that differs in every way a store can (changed pages, a grown
/// and a shrunk database, files added, removed and changed in place with the same size and
/// time, a folder replaced by a file, a database replaced by a file that is not one), the
/// result is byte for byte a full restore's; from S3 it fetches fewer bytes than the archive
/// holds; and a delta restore that fails or is killed leaves the live store or the restored
/// one, exactly.
final class DeltaRestoreTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var backupName = ""
    /// The tree a full restore of the backup makes.
    var reference: [String: StoreFixture.Node] = [:]

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("delta")
        try StoreFixture.make(at: store, logRows: 600, blobCount: 6)
        // Databases of several 1 MiB blocks: one to change and grow, one to shrink.
        try runPythonScript(
            """
            import random, sqlite3, sys
            r = random.Random(51)
            for path, rows in ((sys.argv[1], 40000), (sys.argv[2], 20000)):
                db = sqlite3.connect(path); db.execute("PRAGMA journal_mode=WAL")
                db.execute("CREATE TABLE bulk(id INTEGER PRIMARY KEY, note TEXT)")
                db.executemany("INSERT INTO bulk(note) VALUES(?)", (("%x" % r.getrandbits(400),) for _ in range(rows)))
                db.commit(); db.close()
            """, [store + "/Bulk.sqlite", store + "/Shrinking.sqlite"])
        try FileSystem.createDirectories(store + "/Folder")
        try "inside a folder\n".write(toFile: store + "/Folder/file.txt", atomically: false, encoding: .utf8)
        let created = try runStoreBackup(["create", store, "--to", backups], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let full = work + "/full/Stores"
        try FileSystem.createDirectories(work + "/full")
        let restored = try runStoreBackup(["restore", backupName, full, "--from", backups, "--yes"], environment: ["HOME": work])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        reference = try StoreFixture.describe(full)
    }

    override func tearDownWithError() throws {
        try? FileSystem.removeTree(work)
    }

    /// Every kind of difference at once, restored with `--delta` from a local folder: the
    /// tree a full restore makes, with most of the bytes taken from the live store.
    func testDeltaRestoreUndoesEveryKindOfChange() throws {
        try changeLiveStore()
        XCTAssertNotEqual(try StoreFixture.describe(store, includeJournals: false), reference)
        let restored = try runStoreBackup(
            ["restore", backupName, store, "--from", backups, "--yes", "--delta", "--json"], environment: ["HOME": work])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertEqual(try StoreFixture.describe(store), reference, "the tree a full restore makes")
        let json = try XCTUnwrap(
            JSONSerialization.jsonObject(with: Data(restored.stdout.utf8)) as? [String: Any], restored.stdout)
        let delta = try XCTUnwrap(json["delta"] as? [String: Any], restored.stdout)
        XCTAssertEqual(delta["used"] as? Bool, true)
        // Bulk.sqlite kept the blocks between its changed first one and its grown end; the
        // unchanged blobs and App.sqlite were copied.
        XCTAssertGreaterThanOrEqual(delta["blocksReused"] as? Int ?? 0, 2, "\(delta)")
        XCTAssertGreaterThan(delta["blocksRead"] as? Int ?? 0, 0, "\(delta)")
        XCTAssertGreaterThanOrEqual(delta["filesReused"] as? Int ?? 0, 6, "\(delta)")
        XCTAssertGreaterThan(delta["bytesReused"] as? Int ?? 0, delta["bytesRead"] as? Int ?? 0, "\(delta)")
        XCTAssertTrue(restored.stderr.contains("delta: reused"), restored.stderr)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix("Stores") && $0 != "Stores_Replaced" },
            ["Stores"],
            "nothing left beside the store but the replaced one, kept for undo")
    }

    /// Without a live store there is nothing to reuse: a full restore, and the result says why.
    func testWithoutALiveStoreDeltaIsAFullRestore() async throws {
        try FileSystem.removeTree(store)
        var options = RestoreOptions()
        options.delta = true
        let result = try await StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
            .restore(backupName, options: options)
        XCTAssertEqual(result.delta?.used, false)
        XCTAssertEqual(result.delta?.reason, "there is no live store")
        XCTAssertEqual(try StoreFixture.describe(store), reference)
    }

    /// From S3 (rclone's server, through the counting proxy) only the entries and database
    /// blocks that differ are fetched, in ranges: fewer bytes than the archive holds.
    func testDeltaFromS3FetchesOnlyWhatDiffers() async throws {
        let servers = try TestServers(label: "delta-s3")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let copy = work + "/upload.zip"
        try FileManager.default.copyItem(atPath: backups + "/" + backupName, toPath: copy)
        try await backend.make("delta", nil, StreamingRestoreTests.retry).upload(file: copy, as: backupName, progress: nil)
        let archiveSize = Int64(try FileSystem.lstatInfo(backups + "/" + backupName).st_size)
        try execute(store + "/Bulk.sqlite", "UPDATE bulk SET note = 'changed' WHERE id = 30000")
        try "changed, a different size\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let proxy = try ContractProxy(servers: servers, backend: backend, rules: [], work: work)
        var options = RestoreOptions()
        options.delta = true
        let result = try await StoreHelper(
            storesDirectory: store, destination: try backend.make("delta", proxy.port, StreamingRestoreTests.retry)
        ).restore(backupName, options: options)
        XCTAssertEqual(try StoreFixture.describe(store), reference)
        let delta = try XCTUnwrap(result.delta)
        XCTAssertTrue(delta.used, "\(delta)")
        XCTAssertEqual(delta.filesRead, 1, "notes.txt")
        // WAL commits leave the header's change counter alone: only the changed block.
        XCTAssertEqual(delta.blocksRead, 1, "\(delta)")
        let downloaded = try XCTUnwrap(delta.bytesDownloaded)
        let gets = proxy.entries().filter { ($0["request"] as? String)?.hasPrefix("GET") == true }
            .filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
        XCTAssertEqual(RangedReadTests.downBytes(gets), downloaded, "the proxy saw what the restore counted")
        XCTAssertLessThan(downloaded * 4, archiveSize, "fetched \(downloaded) of \(archiveSize) bytes")
    }

    /// A delta restore whose reload fails rolls back to the live store, exactly; one killed
    /// before the swap, after it, or after the commit is made whole by the next command: the
    /// live store or the restored one, exactly.
    func testFailedOrKilledDeltaRestoreLeavesOneWholeStore() throws {
        try changeLiveStore()
        let live = try StoreFixture.describe(store, includeJournals: false)
        let pristine = work + "/pristine"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", store, pristine]).status, 0)
        let arguments = ["restore", backupName, store, "--from", backups, "--yes", "--delta"]
        let rejected = try runStoreBackup(arguments, environment: ["HOME": work, "STOREBACKUP_TEST_FAIL_RELOAD": "1"])
        XCTAssertNotEqual(rejected.status, 0)
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), live, "rolled back: the live store, exactly")
        try FileSystem.removeTree(StoreLayout(storesDirectory: store).failed)

        for (step, restored) in [("synced", false), ("before-reload", false), ("before-cleanup", true)] {
            let restore = try BackgroundCommand(arguments, environment: ["HOME": work, "STOREBACKUP_TEST_PAUSE_AT": step])
            XCTAssertTrue(restore.waitForLine(containing: "test pause at \(step)"), "\(step): never reached; \(restore.stderrSoFar)")
            restore.kill9()
            let recovered = try runStoreBackup(["recover", store], environment: ["HOME": work])
            XCTAssertEqual(recovered.status, 0, recovered.stderr)
            if restored {
                XCTAssertEqual(try StoreFixture.describe(store), reference, "killed at \(step): the restored store, exactly")
            } else {
                XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), live, "killed at \(step): the live store, exactly")
            }
            XCTAssertEqual(
                try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix("Stores") && $0 != "Stores_Replaced" },
                ["Stores"],
                "\(step): nothing left beside the store but the replaced one, kept for undo")
            try FileSystem.removeTree(store)
            XCTAssertEqual(try runTool("/bin/cp", ["-a", pristine, store]).status, 0)
        }
    }

    // MARK: helpers

    /// Changes the live store in every way the issue names.
    private func changeLiveStore() throws {
        // Changed pages and a grown database.
        try execute(store + "/Bulk.sqlite", "UPDATE bulk SET note = 'changed' WHERE id = 100")
        try execute(store + "/Bulk.sqlite", "INSERT INTO bulk(note) SELECT note || 'x' FROM bulk WHERE id <= 300")
        // A shrunk one.
        try execute(store + "/Shrinking.sqlite", "DELETE FROM bulk WHERE id > 5000")
        try execute(store + "/Shrinking.sqlite", "VACUUM")
        // Files added, removed, and changed in place with the same size and time.
        try "new file\n".write(toFile: store + "/added.txt", atomically: false, encoding: .utf8)
        let blobs = store + "/.App_SUPPORT/_EXTERNAL_DATA"
        let blob = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: blobs).sorted().first)
        try FileManager.default.removeItem(atPath: blobs + "/" + blob)
        let notes = store + "/notes.txt"
        let before = try FileSystem.lstatInfo(notes)
        try "GROCERY LIST\n".write(toFile: notes, atomically: false, encoding: .utf8)
        StoreFixture.setModificationTime(notes, Int(before.st_mtim.tv_sec))
        XCTAssertEqual(try FileSystem.lstatInfo(notes).st_size, before.st_size)
        // A folder replaced by a file, and a database by a file that is not one.
        try FileSystem.removeTree(store + "/Folder")
        try "not a folder any more\n".write(toFile: store + "/Folder", atomically: false, encoding: .utf8)
        try FileManager.default.removeItem(atPath: store + "/Settings.sqlite")
        try String(repeating: "not a database ", count: 1000).write(toFile: store + "/Settings.sqlite", atomically: false, encoding: .utf8)
    }

    private func execute(_ database: String, _ sql: String) throws {
        let connection = try SQLiteConnection(path: database, mode: .readWrite)
        defer { connection.close() }
        try connection.execute(sql, operation: "change the live store")
    }
}
