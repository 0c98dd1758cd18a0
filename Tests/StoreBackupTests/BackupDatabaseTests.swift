import CSQLite
import Foundation
import XCTest

@testable import StoreBackup

/// Queries on a database inside a backup (``BackupDatabase``, `storebackup sql`) through the
/// read-only backup VFS: plain, encrypted, each point of a chain, remote through the fault
/// proxy, a damaged block, writes refused, and a format-3 golden chain.
final class BackupDatabaseTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var local: String { work + "/local" }
    static let rows = 50_000
    static let password = "look-inside-password"

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("look-inside")
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        let db = try SQLiteConnection(path: store + "/App.sqlite", mode: .create)
        try db.execute("PRAGMA journal_mode=wal", operation: "wal")
        try db.execute(
            """
            CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(Self.rows))
            INSERT INTO t SELECT x, 'name ' || x, hex(randomblob(60)) FROM c;
            """, operation: "fill")
        db.close()
        try Data("notes\n".utf8).write(to: URL(fileURLWithPath: store + "/notes.txt"))
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func create(_ extra: [String] = []) throws -> String {
        let created = try runStoreBackup(["create", store, "--to", local] + extra, environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines).components(separatedBy: "\n").last ?? ""
    }

    private func update(_ sql: String) throws {
        let db = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try db.execute(sql, operation: "update")
        db.close()
    }

    private func repository(_ password: String? = nil) throws -> BackupRepository {
        BackupRepository(
            destination: try DestinationResolver.resolve(local),
            passwords: try password.map { PasswordProvider.fixed(try BackupPassword($0)) })
    }

    private func name(of database: BackupDatabase, id: Int) throws -> SQLValue? {
        try database.query("SELECT name FROM t WHERE id = \(id)").first?.rows.first?.first
    }

    func testAPlainFullAnswersFromTheBlocksTheQueryNeeds() async throws {
        let backup = try create()
        let database = try await repository().openDatabase(backup, path: "App.sqlite")
        defer { database.close() }
        XCTAssertEqual(try name(of: database, id: 12_345), .text("name 12345"))
        let blocks = Int((database.size + (1 << 20) - 1) >> 20)
        XCTAssertGreaterThan(blocks, 3)
        XCTAssertLessThan(database.readStatistics.blocksRead, blocks, "a lookup reads only some blocks")
        let results = try database.query("SELECT count(*) FROM t; SELECT max(id), min(name) FROM t")
        XCTAssertEqual(results.map(\.rows), [[[.integer(Int64(Self.rows))]], [[.integer(Int64(Self.rows)), .text("name 1")]]])
        XCTAssertEqual(results[1].columns, ["max(id)", "min(name)"])
        // The command line: a table, CSV and JSON.
        let table = try runStoreBackup(["sql", "latest", "App.sqlite", "SELECT id, name FROM t WHERE id IN (7, 8)", "--from", local])
        XCTAssertEqual(table.status, 0, table.stderr)
        XCTAssertEqual(table.stdout, "id | name\n---+-------\n7  | name 7\n8  | name 8\n(2 rows)\n")
        let csv = try runStoreBackup(["sql", backup, "App.sqlite", "SELECT id, name FROM t WHERE id = 7", "--from", local, "--csv"])
        XCTAssertEqual(csv.stdout, "id,name\n7,name 7\n")
        let json = try runStoreBackup(["sql", backup, "App.sqlite", "SELECT id, NULL AS n FROM t WHERE id = 7", "--from", local, "--json"])
        let parsed = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]]
        XCTAssertEqual(parsed?.first?["columns"] as? [String], ["id", "n"])
        XCTAssertEqual((parsed?.first?["rows"] as? [[Any]])?.first?.first as? Int, 7)
    }

    func testWritesAreRefused() async throws {
        let backup = try create()
        let database = try await repository().openDatabase(backup, path: "App.sqlite")
        defer { database.close() }
        for sql in ["DELETE FROM t", "SELECT 1; UPDATE t SET name = 'x'", "CREATE TABLE u(x)", "INSERT INTO t(name) VALUES ('x')"] {
            XCTAssertThrowsError(try database.query(sql), sql) { error in
                guard case StoreBackupError.statementRefused = error else { return XCTFail("\(sql): \(error)") }
            }
        }
        // The VFS itself: a connection of one's own cannot open it for writing, nor write through it.
        var writer: OpaquePointer?
        XCTAssertNotEqual(sqlite3_open_v2(database.uri, &writer, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, nil), SQLITE_OK)
        sqlite3_close_v2(writer)
        var reader: OpaquePointer?
        XCTAssertEqual(sqlite3_open_v2(database.uri, &reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nil), SQLITE_OK)
        defer { sqlite3_close_v2(reader) }
        XCTAssertNotEqual(sqlite3_exec(reader, "DELETE FROM t", nil, nil, nil), SQLITE_OK)
        XCTAssertEqual(try name(of: database, id: 3), .text("name 3"))
        let refused = try runStoreBackup(["sql", backup, "App.sqlite", "DROP TABLE t", "--from", local])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("refused \"DROP TABLE t\""), refused.stderr)
    }

    func testAnEncryptedFullNeedsItsPassword() async throws {
        let passwordFile = work + "/password"
        try Data((Self.password + "\n").utf8).write(to: URL(fileURLWithPath: passwordFile))
        chmod(passwordFile, 0o600)
        let backup = try create(["--encrypt", "--password-file", passwordFile])
        let database = try await repository(Self.password).openDatabase(backup, path: "App.sqlite")
        defer { database.close() }
        XCTAssertEqual(try name(of: database, id: 19_999), .text("name 19999"))
        XCTAssertEqual(try database.query("SELECT count(*) FROM t").first?.rows, [[.integer(Int64(Self.rows))]])
        do {
            _ = try await repository().openDatabase(backup, path: "App.sqlite")
            XCTFail("opened without a password")
        } catch StoreBackupError.passwordRequired {}
        do {
            _ = try await repository("wrong").openDatabase(backup, path: "App.sqlite")
            XCTFail("opened with a wrong password")
        } catch StoreBackupError.wrongPassword {}
    }

    /// Each point of a chain of three (a full and two incrementals) answers as the store was.
    func testEachPointOfAChain() async throws {
        var backups = [try create(["--incremental", "--max-delta-share", "1"])]
        try await Task.sleep(nanoseconds: 1_100_000_000)
        try update("UPDATE t SET name = 'night 1' WHERE id % 1000 = 7; DELETE FROM t WHERE id = 500")
        backups.append(try create(["--incremental", "--max-delta-share", "1"]))
        try await Task.sleep(nanoseconds: 1_100_000_000)
        try update(
            "UPDATE t SET name = 'night 2' WHERE id = 7; INSERT INTO t(id, name) VALUES (\(Self.rows + 1), 'added on night 2')")
        backups.append(try create(["--incremental", "--max-delta-share", "1"]))
        let listed = try await repository().list()
        XCTAssertEqual(listed.filter { $0.name.contains("incremental") }.count, 2, "\(listed.map(\.name))")
        let expected: [(id7: String, id1007: String, has500: Int64, count: Int64)] = [
            ("name 7", "name 1007", 1, Int64(Self.rows)),
            ("night 1", "night 1", 0, Int64(Self.rows - 1)),
            ("night 2", "night 1", 0, Int64(Self.rows)),
        ]
        for (backup, want) in zip(backups, expected) {
            let database = try await repository().openDatabase(backup, path: "App.sqlite")
            defer { database.close() }
            XCTAssertEqual(try name(of: database, id: 7), .text(want.id7), backup)
            XCTAssertEqual(try name(of: database, id: 1007), .text(want.id1007), backup)
            let counts = try database.query("SELECT count(*) FROM t WHERE id = 500; SELECT count(*) FROM t").map { $0.rows }
            XCTAssertEqual(counts, [[[.integer(want.has500)]], [[.integer(want.count)]]], backup)
            XCTAssertEqual(try database.query("PRAGMA integrity_check").first?.rows, [[.text("ok")]], backup)
        }
        // Two points of one chain in one connection, as a row diff reads them.
        let newest = try await repository().openDatabase(backups[2], path: "App.sqlite")
        let oldest = try await repository().openDatabase(backups[0], path: "App.sqlite")
        try newest.attach(oldest, as: "before")
        let changed = try newest.query("SELECT count(*) FROM (SELECT id, name FROM main.t EXCEPT SELECT id, name FROM before.t)")
        XCTAssertEqual(changed.first?.rows, [[.integer(Int64(Self.rows / 1000 + 1))]])
        try newest.attach(liveDatabase: store + "/App.sqlite", as: "live")
        XCTAssertEqual(
            try newest.query("SELECT count(*) FROM (SELECT * FROM live.t EXCEPT SELECT * FROM main.t)").first?.rows, [[.integer(0)]])
        newest.close()
    }

    /// A flipped byte in one block: a query that needs that block fails with a clear error,
    /// never with wrong rows; queries that need only other blocks still answer.
    func testADamagedBlockFailsOnlyTheQueriesThatNeedIt() async throws {
        let backup = try create()
        let path = local + "/" + backup
        let reader = try ArchiveReader(path: path, backupName: backup)
        let entry = try XCTUnwrap(reader.entries.first { $0.path == "App.sqlite" })
        let row = try XCTUnwrap(reader.manifest?.files.first { $0.path == "App.sqlite" })
        XCTAssertEqual(reader.manifest?.format, 4)
        let blocks = try XCTUnwrap(row.deflateBlocks)
        XCTAssertEqual(row.deflateBlockHashes?.count, blocks.count)
        let file = try XCTUnwrap(LocalArchiveFile(path: path))
        let dataOffset = try LocalHeader.dataOffset(of: entry, in: file, centralNameLength: nil, backupName: backup)
        reader.release()
        let damaged = blocks.count - 1
        let offset = dataOffset + Int64(blocks.dropLast().reduce(0, +)) + Int64(blocks[damaged] / 2)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64(offset))
        let byte = try XCTUnwrap(handle.readData(ofLength: 1).first)
        try handle.seek(toOffset: UInt64(offset))
        handle.write(Data([byte ^ 0x40]))
        try handle.close()

        let database = try await repository().openDatabase(backup, path: "App.sqlite")
        defer { database.close() }
        XCTAssertThrowsError(try database.query("SELECT count(*), sum(length(body)) FROM t")) { error in
            guard case StoreBackupError.damagedBlock(let name, let db, let block, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual([name, db], [backup, "App.sqlite"])
            XCTAssertEqual(block, damaged)
            XCTAssertTrue("\(error)".contains("block \(damaged) of App.sqlite in backup \"\(backup)\" is damaged"), "\(error)")
        }
        var answered = 0
        for id in [1, 2, 50, 300, 1000, 3000] {
            do {
                let found = try database.query("SELECT name FROM t WHERE id = \(id)").first?.rows.first?.first
                XCTAssertEqual(found, .text("name \(id)"), "never a wrong row")
                answered += 1
            } catch StoreBackupError.damagedBlock {}
        }
        XCTAssertGreaterThan(answered, 0, "a query that does not touch the damaged block answers")
        let command = try runStoreBackup(["sql", backup, "App.sqlite", "SELECT count(*) FROM t", "--from", local])
        XCTAssertNotEqual(command.status, 0)
        XCTAssertTrue(command.stderr.contains("is damaged"), command.stderr)
        XCTAssertEqual(command.stdout, "")
    }

    /// A remote backup on S3 through the fault proxy (a reset answer on the way): ranged
    /// reads of the directory, the manifest and the blocks a lookup needs, not the archive.
    func testARemoteBackupIsReadInRanges() async throws {
        let backup = try create()
        let size = Int64(try FileSystem.lstatInfo(local + "/" + backup).st_size)
        let servers = try TestServers(label: "look-inside-s3")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let retry = RetryPolicy(budget: 60, initialDelay: 0.02, maximumDelay: 0.1)
        let copy = work + "/upload.zip"
        try FileManager.default.copyItem(atPath: local + "/" + backup, toPath: copy)
        try await backend.make("look", nil, retry).upload(file: copy, as: backup, progress: nil)
        let zipGET: [String: Any] = ["method": "GET", "path_contains": "Stores.zip"]
        let proxy = try ContractProxy(
            servers: servers, backend: backend,
            rules: [zipGET.merging(["requests": [3], "fault": "reset", "phase": "response", "after_bytes": 1000]) { $1 }], work: work)
        let remote = BackupRepository(destination: try backend.make("look", proxy.port, retry))
        let database = try await remote.openDatabase("latest", path: "App.sqlite")
        XCTAssertEqual(try name(of: database, id: 4321), .text("name 4321"))
        let fetched = try XCTUnwrap(database.readStatistics.fetchedBytes)
        database.close()
        XCTAssertLessThan(fetched, size / 2, "fetched \(fetched) of \(size) bytes")
        let gets = proxy.entries().filter { ($0["request"] as? String)?.hasPrefix("GET") == true }
        XCTAssertEqual(ContractProxy.faults(gets).count, 1, "the fault struck")
    }

    /// A format-3 golden chain (no block hashes) is read whole once, checked, and queried.
    func testAFormat3GoldenChainIsQueryable() async throws {
        let golden = try XCTUnwrap(try GoldenArchiveTests.goldenArchives().first { $0.format == 3 && $0.kind == "chain" })
        try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true)
        for name in golden.archiveNames {
            try FileManager.default.copyItem(atPath: golden.folder + "/" + name, toPath: local + "/" + name)
        }
        for link in golden.chain {
            let database = try await repository().openDatabase(link.archive, path: "App.sqlite")
            let viaVFS = try database.query("SELECT * FROM t ORDER BY id").first?.rows
            database.close()
            let extracted = work + "/extract-" + String(link.archive.prefix(17)).replacingOccurrences(of: " ", with: "-")
            let result = try runStoreBackup(["extract", link.archive, "App.sqlite", "--into", extracted, "--from", local])
            XCTAssertEqual(result.status, 0, result.stderr)
            let copy = try SQLiteConnection(path: extracted + "/App.sqlite", mode: .immutable)
            let rows = try copy.rows("SELECT * FROM t ORDER BY id", operation: "read")
            copy.close()
            XCTAssertEqual(viaVFS?.map { $0.map(SqlText.text) }, rows, link.archive)
            XCTAssertFalse(rows.isEmpty, link.archive)
        }
    }
}

/// A value as SQLiteConnection.rows gives it (text; NULL as "").
private enum SqlText {
    static func text(_ value: SQLValue) -> String {
        switch value {
        case .null: ""
        case .integer(let number): String(number)
        case .real(let number): String(number)
        case .text(let text): text
        case .blob(let bytes): String(decoding: bytes, as: UTF8.self)
        }
    }
}
