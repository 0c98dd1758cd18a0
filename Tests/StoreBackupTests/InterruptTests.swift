import Foundation
import XCTest
@testable import StoreBackup

/// The command line stopped from outside while it works: kill -9 of `create` once its
/// temporary archive exists, and SIGTERM / SIGINT during `create` and `restore`. Each
/// waits for an event it can see (the temporary archive, the `_New` folder appearing),
/// never for a length of time.
final class InterruptTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    /// TMPDIR of every command, so leftovers there are seen exactly.
    var scratch: String { work + "/tmp" }
    var environment: [String: String] { ["TMPDIR": scratch] }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("interrupt")
        try FileSystem.createDirectories(scratch)
        try FileSystem.createDirectories(backups)
        try StoreFixture.make(at: store, logRows: 3_000, blobCount: 4)
        // Random bytes do not compress: archiving and extracting them takes a while.
        let random = FileHandle(forReadingAtPath: "/dev/urandom")!
        defer { try? random.close() }
        FileManager.default.createFile(atPath: store + "/.App_SUPPORT/video.bin", contents: nil)
        let video = FileHandle(forWritingAtPath: store + "/.App_SUPPORT/video.bin")!
        defer { try? video.close() }
        for _ in 0..<48 { video.write(random.readData(ofLength: 1 << 20)) }
    }

    override func tearDownWithError() throws {
        try? FileSystem.removeTree(work)
    }

    // MARK: kill -9

    /// A create killed once its temporary archive exists lists nothing; the next create
    /// removes the dead one's temporary and publishes exactly one backup.
    func testKilledCreateLeavesNothingListedAndTheNextRunRemovesItsTemporary() throws {
        let create = try BackgroundCommand(["create", store, "--to", backups], environment: environment)
        let temporary = waitForTemporaryArchive(of: create)
        XCTAssertNotNil(temporary, "create ended before its temporary archive appeared: \(create.stderrSoFar)")
        create.kill9()
        if let temporary { XCTAssertTrue(FileSystem.fileExists(backups + "/" + temporary), "the kill left the temporary") }
        XCTAssertEqual(try listed(), [], "nothing listed after the kill")

        let next = try runStoreBackup(["create", store, "--to", backups], environment: environment)
        XCTAssertEqual(next.status, 0, next.stderr)
        let names = try FileManager.default.contentsOfDirectory(atPath: backups)
        XCTAssertEqual(names, [next.stdout.trimmingCharacters(in: .whitespacesAndNewlines)], "the dead run's temporary is gone")
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    // MARK: SIGTERM and SIGINT

    func testSIGTERMDuringCreateExits130AndLeavesNothing() throws { try interruptCreate(with: SIGTERM) }
    func testSIGINTDuringCreateExits130AndLeavesNothing() throws { try interruptCreate(with: SIGINT) }
    func testSIGTERMDuringRestoreExits130AndKeepsTheLiveStore() throws { try interruptRestore(with: SIGTERM) }
    func testSIGINTDuringRestoreExits130AndKeepsTheLiveStore() throws { try interruptRestore(with: SIGINT) }

    func interruptCreate(with signal: Int32) throws {
        let before = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let create = try BackgroundCommand(["create", store, "--to", backups], environment: environment)
        XCTAssertNotNil(waitForTemporaryArchive(of: create), "create ended before its temporary archive appeared: \(create.stderrSoFar)")
        kill(create.process.processIdentifier, signal)
        XCTAssertEqual(create.waitForExit(), 130, "signal \(signal): \(create.stderrSoFar)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backups), [], "no backup and no temporary")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: scratch), [], "nothing left in TMPDIR")
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false), before)
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    func interruptRestore(with signal: Int32) throws {
        let created = try runStoreBackup(["create", store, "--to", backups], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        // The live store moves on after the backup: the old and the restored one differ.
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let live = try StoreFixture.describe(store, includeJournals: false)
        let layout = StoreLayout(storesDirectory: store)

        let restore = try BackgroundCommand(["restore", "latest", store, "--from", backups, "--yes"], environment: environment)
        var extracting = false
        while !extracting && restore.process.isRunning {
            extracting = FileSystem.fileExists(layout.new)
            if !extracting { usleep(200) }
        }
        XCTAssertTrue(extracting, "restore ended before it began extracting: \(restore.stderrSoFar)")
        kill(restore.process.processIdentifier, signal)
        XCTAssertEqual(restore.waitForExit(), 130, "signal \(signal): \(restore.stderrSoFar)")
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), live, "the live store is untouched")
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
        for leftover in [layout.new, layout.old, layout.failed, layout.journal] {
            XCTAssertFalse(FileSystem.fileExists(leftover), "left behind: \(leftover)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: scratch), [], "nothing left in TMPDIR")
        let siblings = try FileManager.default.contentsOfDirectory(atPath: work).filter { ScratchFiles.owner(of: $0) != nil }
        XCTAssertEqual(siblings, [], "no temporary beside the store")
    }

    // MARK: helpers

    /// Polls the destination folder until `command`'s temporary archive exists; its name,
    /// or nil when the command ended first.
    func waitForTemporaryArchive(of command: BackgroundCommand) -> String? {
        let prefix = ScratchFiles.prefix + "\(command.process.processIdentifier)-"
        while command.process.isRunning {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: backups)) ?? []
            if let name = names.first(where: { $0.hasPrefix(prefix) && $0.hasSuffix(".zip") }) { return name }
            usleep(200)
        }
        return nil
    }

    func listed() throws -> [String] {
        let result = try runStoreBackup(["list", "--json", "--from", backups], environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        return ((try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8))) as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
    }
}
