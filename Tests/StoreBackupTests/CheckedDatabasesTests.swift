import Foundation
import XCTest

@testable import StoreBackup

/// Reload skips the second read of a database only while it is the very file restore just
/// checked in full; any change since makes reload check it again.
final class CheckedDatabasesTests: XCTestCase {
    func testADatabaseChangedAfterItsFullCheckIsCheckedAgainOnReload() throws {
        let directory = try TestEnvironment.temporaryDirectory("checked-databases")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/Data.sqlite"
        try runPythonScript(
            """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT)")
            db.executemany("INSERT INTO t(x) VALUES (?)", [("row %d" % i * 20,) for i in range(2000)])
            db.commit(); db.close()
            """, [path])

        try IntegrityCheck.run(path)
        XCTAssertTrue(CheckedDatabases.isUnchanged(path))
        XCTAssertNoThrow(try DatabaseCheck.quickCheckAll(in: directory))

        // Checked in full, then damaged: the table's root page (page 2) is overwritten.
        try IntegrityCheck.run(path)
        try runPythonScript(
            """
            import sys
            with open(sys.argv[1], "r+b") as f:
                f.seek(4096); f.write(b"\\xff" * 4096)
            """, [path])
        XCTAssertFalse(CheckedDatabases.isUnchanged(path))
        XCTAssertThrowsError(try DatabaseCheck.quickCheckAll(in: directory)) { error in
            guard case StoreBackupError.databaseCheckFailed = error else { return XCTFail("unexpected error: \(error)") }
        }
    }
}
