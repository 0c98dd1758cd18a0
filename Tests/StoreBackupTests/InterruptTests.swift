import Foundation
import XCTest

@testable import StoreBackup

/// The command line stopped from outside while it works: kill -9 of `create` once its
/// temporary archive exists, and SIGTERM / SIGINT during `create` and `restore` (exit 130,
/// nothing half-done left, the live store as it was). Each waits for an event it can see
/// (the temporary archive, the `_New` folder appearing), never for a length of time.
extension CrashSafetyTests {
    // MARK: kill -9

    /// A create killed once its temporary archive exists lists nothing new; the next create
    /// removes the dead one's temporary and publishes exactly one more backup.
    func testKilledCreateLeavesNothingListedAndTheNextRunRemovesItsTemporary() throws {
        try addIncompressibleFile()
        let before = try listedBackups()
        let create = try BackgroundCommand(["create", store, "--to", backups], environment: environment)
        let temporary = waitForTemporaryArchive(of: create)
        XCTAssertNotNil(temporary, "create ended before its temporary archive appeared: \(create.stderrSoFar)")
        create.kill9()
        let mine = ScratchFiles.prefix + "\(create.process.processIdentifier)-"
        XCTAssertTrue(
            try FileManager.default.contentsOfDirectory(atPath: backups).contains { $0.hasPrefix(mine) },
            "the kill left its temporary (\(temporary ?? "none seen")) behind")
        let list = try runStoreBackup(["list", "--json", "--from", backups], environment: environment)
        let rows = (try? JSONSerialization.jsonObject(with: Data(list.stdout.utf8))) as? [[String: Any]]
        XCTAssertEqual(Set(rows?.compactMap { $0["name"] as? String } ?? []), before, "nothing new listed after the kill: \(list.stderr)")

        let next = try runStoreBackup(["create", store, "--to", backups], environment: environment)
        XCTAssertEqual(next.status, 0, next.stderr)
        XCTAssertEqual(
            Set(try FileManager.default.contentsOfDirectory(atPath: backups)),
            before.union([next.stdout.trimmingCharacters(in: .whitespacesAndNewlines)]), "the dead run's temporary is gone")
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
        assertNoTemporaries(allowFailedRestore: false, "after a killed create and the next one")
    }

    // MARK: SIGTERM and SIGINT

    func testSIGTERMDuringCreateExits130AndLeavesNothing() throws { try interruptCreate(with: SIGTERM) }
    func testSIGINTDuringCreateExits130AndLeavesNothing() throws { try interruptCreate(with: SIGINT) }
    func testSIGTERMDuringRestoreExits130AndKeepsTheLiveStore() throws { try interruptRestore(with: SIGTERM) }
    func testSIGINTDuringRestoreExits130AndKeepsTheLiveStore() throws { try interruptRestore(with: SIGINT) }

    private func interruptCreate(with signal: Int32) throws {
        try addIncompressibleFile()
        let before = try listedBackups()
        let tree = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let create = try BackgroundCommand(["create", store, "--to", backups], environment: environment)
        XCTAssertNotNil(waitForTemporaryArchive(of: create), "create ended before its temporary archive appeared: \(create.stderrSoFar)")
        kill(create.process.processIdentifier, signal)
        XCTAssertEqual(create.waitForExit(), 130, "signal \(signal): \(create.stderrSoFar)")
        XCTAssertEqual(try listedBackups(), before, "no new backup")
        assertNoTemporaries(allowFailedRestore: false, "create stopped by signal \(signal)")
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false), tree)
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    private func interruptRestore(with signal: Int32) throws {
        try addIncompressibleFile()
        let created = try runStoreBackup(["create", store, "--to", backups], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        // The live store moves on after the backup: the old and the restored one differ.
        try "changed after the second backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        let live = try StoreFixture.describe(store, includeJournals: false)
        let layout = StoreLayout(storesDirectory: store)

        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let restore = try BackgroundCommand(["restore", name, store, "--from", backups, "--yes"], environment: environment)
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
        assertNoTemporaries(allowFailedRestore: false, "restore stopped by signal \(signal)")
    }

    /// 48 MiB of random bytes (they do not compress): archiving and extracting take long
    /// enough for a signal to land part-way.
    private func addIncompressibleFile() throws {
        let random = FileHandle(forReadingAtPath: "/dev/urandom")!
        defer { try? random.close() }
        let path = store + "/.App_SUPPORT/video.bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        let video = FileHandle(forWritingAtPath: path)!
        defer { try? video.close() }
        for _ in 0..<48 { video.write(random.readData(ofLength: 1 << 20)) }
    }

    /// Polls the destination folder until `command`'s temporary archive exists (libzip's
    /// `….zip.XXXXXX` while it writes, then `….zip` until published); its name, or nil when
    /// the command ended first. The first one appears as archiving starts, well before the end.
    private func waitForTemporaryArchive(of command: BackgroundCommand) -> String? {
        let prefix = ScratchFiles.prefix + "\(command.process.processIdentifier)-"
        while command.process.isRunning {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: backups)) ?? []
            if let name = names.first(where: { $0.hasPrefix(prefix) && $0.contains("-archive-") }) { return name }
            usleep(200)
        }
        return nil
    }
}
