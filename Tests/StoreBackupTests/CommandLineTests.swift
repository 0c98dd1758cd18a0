import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance: list, delete, the per-store lock, and clear errors for bad input.
final class CommandLineTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("cli")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testListShowsOnlyBackupsNewestFirstAndDeleteRemovesExactlyOne() throws {
        let folder = work + "/backups"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let names = [
            "2026-11-20 010203 Stores.zip",
            "2026-11-22 031507 Stores.zip",
            "[2026-Nov-21] 10.15 PM Stores.zip",  // the seed app's own naming
            "2025-01-01 000000 Stores.zip",
        ]
        for (index, name) in names.enumerated() {
            FileManager.default.createFile(atPath: folder + "/" + name, contents: Data(repeating: 7, count: 100 * (index + 1)))
        }
        for other in ["notes.txt", "2026-11-23 000000 Stores.zip.partial", ".storebackup-tmp-1-x.zip", "Stores.zip"] {
            FileManager.default.createFile(atPath: folder + "/" + other, contents: Data("x".utf8))
        }
        try FileManager.default.createDirectory(atPath: folder + "/2026-12-01 000000 Stores.zip", withIntermediateDirectories: true)

        let listed = try runStoreBackup(["list", "--to", folder, "--json"])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as! [[String: Any]]
        XCTAssertEqual(
            rows.map { $0["name"] as! String },
            [
                "2026-11-22 031507 Stores.zip",
                "[2026-Nov-21] 10.15 PM Stores.zip",
                "2026-11-20 010203 Stores.zip",
                "2025-01-01 000000 Stores.zip",
            ])
        XCTAssertEqual(rows[0]["size"] as? Int, 200)
        XCTAssertEqual(rows[0]["date"] as? String, "2026-11-22T03:15:07Z")

        let plain = try runStoreBackup(["list", "--to", folder])
        XCTAssertTrue(plain.stdout.split(separator: "\n").first?.hasSuffix("2026-11-22 031507 Stores.zip") ?? false, plain.stdout)

        let deleted = try runStoreBackup(["delete", "2026-11-20 010203 Stores.zip", "--to", folder, "--yes"])
        XCTAssertEqual(deleted.status, 0, deleted.stderr)
        let remaining = try FileManager.default.contentsOfDirectory(atPath: folder)
        XCTAssertFalse(remaining.contains("2026-11-20 010203 Stores.zip"))
        XCTAssertEqual(remaining.count, names.count - 1 + 5, "exactly one file removed")

        let unknown = try runStoreBackup(["delete", "1999-01-01 000000 Stores.zip", "--to", folder, "--yes"])
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("no backup named"), unknown.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder).count, remaining.count)
    }

    func testSecondCreateOnTheSameStoreIsRefused() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 2)
        let first = try BackgroundCommand(
            ["create", store, "--to", work + "/backups"],
            environment: ["STOREBACKUP_TEST_PAUSE_AT": "create-locked"])
        XCTAssertTrue(first.waitForLine(containing: "test pause at create-locked"))
        let second = try runStoreBackup(["create", store, "--to", work + "/backups"])
        first.kill9()
        XCTAssertNotEqual(second.status, 0)
        XCTAssertTrue(second.stderr.contains("in use by another backup, restore or recovery"), second.stderr)
        XCTAssertTrue(second.stderr.contains("pid \(first.process.processIdentifier)"), "names the holder: \(second.stderr)")

        // The lock dies with its holder: the next create works and leaves exactly one backup.
        let third = try runStoreBackup(["create", store, "--to", work + "/backups"])
        XCTAssertEqual(third.status, 0, third.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/backups").count, 1)
    }

    func testBadInputGivesOneClearLineAndNonZeroExit() throws {
        let empty = work + "/Empty"
        try FileManager.default.createDirectory(atPath: empty + "/sub", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: empty + "/readme.txt", contents: Data("no database here".utf8))
        let cases: [(arguments: [String], message: String)] = [
            (["create", work + "/missing", "--to", work + "/b"], "does not exist"),
            (["create", empty, "--to", work + "/b"], "no SQLite database found"),
            (["restore", "1999-01-01 000000 Stores.zip", work + "/R", "--from", work + "/b", "--yes"], "no backup named"),
            (["restore", "latest", work + "/R", "--from", work + "/nothing-here", "--yes"], "there are no backups"),
            (["restore", "not-a-backup.zip", work + "/R", "--from", work + "/b", "--yes"], "is not a backup name"),
            (["list", "--to", "gopher://example/x"], "not supported"),
            (["create", empty, "--level", "11"], "--level"),
            (["create", empty, "--threads", "0"], "--threads must be a number from 1 to 16"),
        ]
        for (arguments, message) in cases {
            let result = try runStoreBackup(arguments)
            XCTAssertNotEqual(result.status, 0, "\(arguments)")
            XCTAssertTrue(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            XCTAssertFalse(result.stderr.contains("Fatal error"), result.stderr)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/R"), "nothing was created")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: empty).sorted(), ["readme.txt", "sub"])
    }

    func testDiffShowsADeletedRowAndItsSQLPutsItBack() throws {
        let store = work + "/Stores", backups = work + "/backups"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 2)
        XCTAssertEqual(try runStoreBackup(["create", store, "--to", backups]).status, 0)
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        let logBefore = try app.rows("SELECT id, note FROM log ORDER BY id", operation: "read")
        try app.execute("DELETE FROM accounts WHERE id = 7; INSERT INTO log(note) VALUES('after the backup')", operation: "write")
        app.close()
        FileManager.default.createFile(atPath: store + "/.App_SUPPORT/_EXTERNAL_DATA/NEW", contents: Data("x".utf8))

        let counts = try runStoreBackup(["diff", "latest", "live", store, "--from", backups])
        XCTAssertEqual(counts.status, 0, counts.stderr)
        XCTAssertTrue(counts.stdout.contains("table accounts (by id): 0 inserted, 1 deleted, 0 changed"), counts.stdout)
        XCTAssertTrue(counts.stdout.contains("table log (by id): 1 inserted, 0 deleted, 0 changed"), counts.stdout)
        XCTAssertTrue(counts.stdout.contains("added    .App_SUPPORT/_EXTERNAL_DATA/NEW"), counts.stdout)
        XCTAssertTrue(counts.stdout.contains("Settings.sqlite: no changes"), counts.stdout)
        let rows = try runStoreBackup(["diff", "latest", "live", store, "App.sqlite", "--table", "accounts", "--rows", "--from", backups])
        XCTAssertTrue(rows.stdout.contains("deleted  [id=7]  id=7 balance=1000"), rows.stdout)
        let json = try runStoreBackup(["diff", "latest", "live", store, "App.sqlite", "--json", "--rows", "--from", backups])
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let tables = ((object["databases"] as? [[String: Any]])?.first?["tables"] as? [[String: Any]]) ?? []
        XCTAssertEqual(tables.first { $0["name"] as? String == "accounts" }?["deleted"] as? Int, 1, json.stdout)

        // The SQL, applied by hand, puts the one row back and leaves the rest as it is.
        let sql = try runStoreBackup(["diff", "latest", "live", store, "App.sqlite", "--table", "accounts", "--sql", "--from", backups])
        XCTAssertEqual(sql.status, 0, sql.stderr)
        XCTAssertEqual(
            sql.stdout, "BEGIN;\nPRAGMA defer_foreign_keys = ON;\nINSERT INTO \"accounts\"(\"id\", \"balance\") VALUES(7, 1000);\nCOMMIT;\n"
        )
        let applied = try runTool("/usr/bin/sqlite3", [store + "/App.sqlite"], stdin: sql.stdout)
        XCTAssertEqual(applied.status, 0, applied.stderr)
        let after = try SQLiteConnection(path: store + "/App.sqlite", mode: .readOnly)
        XCTAssertEqual(try after.scalar("SELECT count(*) FROM accounts WHERE balance = 1000", operation: "read"), "20")
        XCTAssertEqual(try after.rows("SELECT id, note FROM log WHERE id <= 100 ORDER BY id", operation: "read"), logBefore)
        XCTAssertEqual(try after.scalar("SELECT note FROM log ORDER BY id DESC LIMIT 1", operation: "read"), "after the backup")
        after.close()
        let again = try runStoreBackup(["diff", "latest", "live", store, "App.sqlite", "--table", "accounts", "--from", backups])
        XCTAssertTrue(again.stdout.contains("table accounts") == false && again.stdout.contains("App.sqlite: no changes"), again.stdout)

        let refusals: [(arguments: [String], message: String)] = [
            (["diff", "latest", "latest", "App.sqlite", "--sql"], "the newer side must be `live STORES_DIR`"),
            (["diff", "latest", "live", store, "--sql"], "--sql needs the DATABASE"),
            (["diff", "latest", "live", store, "App.sqlite", "--table", "nope"], "no table named \"nope\""),
            (["diff", "latest", "live", store, "Nope.sqlite"], "no database \"Nope.sqlite\""),
            (["diff", "latest", "live", store, "App.sqlite", "--where", "no_such_column = 1"], "no such column"),
        ]
        for (arguments, message) in refusals {
            let result = try runStoreBackup(arguments + ["--from", backups])
            XCTAssertNotEqual(result.status, 0, "\(arguments)")
            XCTAssertTrue(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }

    func testAFileInsteadOfADirectoryIsAClearError() throws {
        let file = work + "/not-a-folder"
        FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let result = try runStoreBackup(["create", file, "--to", work + "/b"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("not a directory"), result.stderr)
    }

    func testHelpExplainsEveryCommand() throws {
        let help = try runStoreBackup(["--help"])
        for command in ["create", "list", "restore", "delete", "recover"] {
            XCTAssertTrue(help.stdout.contains(command), help.stdout)
        }
        let restoreHelp = try runStoreBackup(["restore", "--help"])
        XCTAssertTrue(restoreHelp.stdout.contains("_FailedRestore"), restoreHelp.stdout)
    }
}
