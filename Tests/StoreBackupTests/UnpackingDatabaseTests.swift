import Foundation
import XCTest

@testable import StoreBackup

/// Restore checks a database while it unpacks it: the check reads through a VFS whose reads
/// wait for the bytes the unpacking has reported written, and fail once it gives up.
final class UnpackingDatabaseTests: XCTestCase {
    var directory = ""
    var source = ""

    override func setUpWithError() throws {
        directory = try TestEnvironment.temporaryDirectory("unpacking-database")
        source = directory + "/Source.sqlite"
        // About 3 MiB with an index, so the check reads every part of the file.
        try runPythonScript(
            """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT)")
            db.execute("CREATE INDEX t_x ON t(x)")
            db.executemany("INSERT INTO t(x) VALUES (?)", [("row %d " % i * 8,) for i in range(30000)])
            db.commit(); db.close()
            """, [source])
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The whole database is already on disk but only its first half is reported written:
    /// the check must wait at the half and fail when the writer gives up. (Reading without
    /// waiting would find a whole, sound database and pass.)
    func testReadsWaitForTheWriterAndFailWhenItGivesUp() throws {
        let contents = try Data(contentsOf: URL(fileURLWithPath: source))
        let path = directory + "/Half.sqlite"
        try contents.write(to: URL(fileURLWithPath: path))
        let unpacking = try UnpackingDatabase(size: Int64(contents.count))
        unpacking.advance(to: Int64(contents.count / 2))

        let checked = expectation(description: "check returned")
        let outcome = Locked<Result<Void, Error>?>(nil)
        Thread.detachNewThread {
            outcome.withLock { $0 = Result { try IntegrityCheck.run(path, unpacking: unpacking) } }
            checked.fulfill()
        }
        unpacking.fail()
        wait(for: [checked], timeout: 60)
        let result = try XCTUnwrap(outcome.withLock { $0 })
        // SQLite reports the failed read as an open error or inside integrity_check's own report.
        XCTAssertThrowsError(try result.get(), "a sound database on disk, so only the failed wait can fail it")
        XCTAssertFalse(CheckedDatabases.isUnchanged(path), "a failed unpacking is never recorded as checked")
    }

    /// Written in 64 KiB steps by another thread, each reported as it lands: the check
    /// follows and passes, and the finished file counts as checked for reload.
    func testACheckFollowingTheWriterPassesAndIsRecorded() throws {
        let contents = try Data(contentsOf: URL(fileURLWithPath: source))
        let path = directory + "/Following.sqlite"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        let unpacking = try UnpackingDatabase(size: Int64(contents.count))

        let checked = expectation(description: "check returned")
        let outcome = Locked<Result<Void, Error>?>(nil)
        Thread.detachNewThread {
            outcome.withLock { $0 = Result { try IntegrityCheck.run(path, unpacking: unpacking) } }
            checked.fulfill()
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var offset = 0
        while offset < contents.count {
            let end = min(offset + 65_536, contents.count)
            try handle.write(contentsOf: contents[offset..<end])
            offset = end
            unpacking.advance(to: Int64(offset))
        }
        try handle.close()
        unpacking.finish()
        wait(for: [checked], timeout: 60)
        let result = try XCTUnwrap(outcome.withLock { $0 })
        XCTAssertNoThrow(try result.get())
        XCTAssertTrue(CheckedDatabases.isUnchanged(path))
    }
}
