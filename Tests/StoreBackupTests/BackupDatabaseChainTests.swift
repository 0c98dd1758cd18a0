import Foundation
import XCTest

@testable import StoreBackup

/// Queries on the points of a chain whose page deltas span many blocks: a point's pages are
/// found through its chain's page maps and read out of the one block of a delta that holds
/// each (format 4, `pageDeltas` in the manifest), plain and encrypted, local and remote
/// through the fault proxy; a damaged delta block; and deltas without block hashes (stored
/// at level 0, or an archive whose manifest does not list them), which are read whole.
final class BackupDatabaseChainTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var local: String { work + "/local" }
    static let rows = 50_000
    static let password = "chain-look-inside-password"

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("look-inside-chain")
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        try update(
            """
            PRAGMA journal_mode=wal;
            CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(Self.rows))
            INSERT INTO t SELECT x, 'name ' || x, hex(randomblob(60)) FROM c;
            """, create: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func update(_ sql: String, create: Bool = false) throws {
        let db = try SQLiteConnection(path: store + "/App.sqlite", mode: create ? .create : .readWrite)
        try db.execute(sql, operation: "update")
        db.close()
    }

    private func create(_ extra: [String]) throws -> String {
        // Names are by the second.
        Thread.sleep(forTimeInterval: 1.1)
        let created = try runStoreBackup(
            ["create", store, "--to", local, "--incremental", "--max-delta-share", "1"] + extra, environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines).components(separatedBy: "\n").last ?? ""
    }

    /// The store's database as it is now, copied for comparing a point with.
    private func snapshot(_ number: Int) throws -> String {
        let path = work + "/state-\(number).sqlite"
        try update("VACUUM INTO '\(path)'")
        return path
    }

    private var passwordArguments: [String] {
        get throws {
            let file = work + "/password"
            try Data((Self.password + "\n").utf8).write(to: URL(fileURLWithPath: file))
            chmod(file, 0o600)
            return ["--encrypt", "--password-file", file]
        }
    }

    /// A full and three incrementals, each after changes spread over much of the table (page
    /// deltas of several 1 MiB blocks); with `storedSecond`, the second incremental at level 0
    /// (its delta stored). Returns the backups, oldest first, and a copy of the database as
    /// each one saw it.
    private func makeChain(_ extra: [String] = [], storedSecond: Bool = true) throws -> [(name: String, state: String)] {
        var chain = [(try create(extra), try snapshot(0))]
        try update("UPDATE t SET body = hex(randomblob(60)) WHERE id % 5 = 1 AND id <= 30000")
        chain.append((try create(extra), try snapshot(1)))
        try update("UPDATE t SET name = 'night 2 ' || id WHERE id BETWEEN 20000 AND 32000")
        chain.append((try create(extra + (storedSecond ? ["--level", "0"] : [])), try snapshot(2)))
        try update(
            """
            UPDATE t SET body = hex(randomblob(60)) WHERE id % 9 = 4 AND id > 25000;
            DELETE FROM t WHERE id BETWEEN 40000 AND 40100;
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000)
            INSERT INTO t(name, body) SELECT 'night 3 ' || x, hex(randomblob(60)) FROM c;
            """)
        chain.append((try create(extra), try snapshot(3)))
        XCTAssertEqual(chain.filter { $0.0.contains("incremental") }.count, 3, "\(chain.map(\.0))")
        return chain
    }

    private func repository(_ password: String? = nil) throws -> BackupRepository {
        BackupRepository(
            destination: try DestinationResolver.resolve(local),
            passwords: try password.map { PasswordProvider.fixed(try BackupPassword($0)) })
    }

    /// The point holds exactly the rows of `state`, and SQLite finds the database sound.
    private func checkRows(_ database: BackupDatabase, as state: String, _ label: String) throws {
        try database.attach(liveDatabase: state, as: "expected")
        let differing = try database.query(
            """
            SELECT count(*) FROM (SELECT * FROM main.t EXCEPT SELECT * FROM expected.t);
            SELECT count(*) FROM (SELECT * FROM expected.t EXCEPT SELECT * FROM main.t);
            SELECT count(*) FROM main.t
            """)
        let expected = try SQLiteConnection(path: state, mode: .immutable)
        let count = try expected.rows("SELECT count(*) FROM t", operation: "count").first?.first ?? ""
        expected.close()
        XCTAssertEqual(differing.map(\.rows), [[[.integer(0)]], [[.integer(0)]], [[.integer(Int64(count) ?? -1)]]], label)
        XCTAssertEqual(try database.query("PRAGMA main.integrity_check").first?.rows, [[.text("ok")]], label)
    }

    /// The manifest's `pageDeltas` row of App.sqlite in `backup`, and its delta entry.
    private func pageDelta(of backup: String, password: String? = nil) throws -> (row: Manifest.PageDelta, entry: ArchiveEntry) {
        let reader = try ArchiveReader(
            path: local + "/" + backup, backupName: backup, passwords: try password.map { .fixed(try BackupPassword($0)) })
        defer { reader.release() }
        let row = try XCTUnwrap(reader.manifest?.pageDeltas?.first { $0.path == "App.sqlite" }, backup)
        return (row, try XCTUnwrap(reader.pageDeltas["App.sqlite"], backup))
    }

    func testEachPointOfAChainOfLargeDeltas() async throws {
        let chain = try makeChain()
        // Deflated deltas list their blocks and block hashes; the stored one its size and SHA-256 only.
        for (index, link) in chain.enumerated().dropFirst() {
            let (row, entry) = try pageDelta(of: link.name)
            XCTAssertEqual(row.size, entry.size, link.name)
            if index == 2 {
                XCTAssertNil(row.deflateBlocks, "a stored delta has no block list")
            } else {
                XCTAssertGreaterThan(row.deflateBlocks?.count ?? 0, 2, link.name)
                XCTAssertEqual(row.deflateBlockHashes?.count, row.deflateBlocks?.count, link.name)
            }
        }
        for link in chain {
            let database = try await repository().openDatabase(link.name, path: "App.sqlite")
            defer { database.close() }
            try checkRows(database, as: link.state, link.name)
        }

        // A lookup in the tip reads a few blocks of its deltas, not the deltas.
        let tip = try await repository().openDatabase(chain[3].name, path: "App.sqlite")
        XCTAssertEqual(try tip.query("SELECT name FROM t WHERE id = 25001").first?.rows, [[.text("night 2 25001")]])
        let read = tip.readStatistics
        tip.close()
        let deltaBytes = try [1, 3].map { try pageDelta(of: chain[$0].name).entry.compressedSize }.reduce(0, +)
        XCTAssertLessThanOrEqual(read.blocksRead, 8, "\(read)")
        XCTAssertLessThan(read.compressedBytesRead, deltaBytes / 3, "\(read) of \(deltaBytes) bytes of deflated deltas")

        // The tip's manifest without `pageDeltas`, as a format-4 archive written before them: read whole, same rows.
        try runPythonScript(
            """
            import json, sys, zipfile
            with zipfile.ZipFile(sys.argv[1]) as z:
                manifest = json.loads(z.read(".storebackup/manifest.json"))
            del manifest["pageDeltas"]
            open(sys.argv[2], "w").write(json.dumps(manifest, indent=2, sort_keys=True))
            """, [local + "/" + chain[3].name, work + "/manifest.json"])
        try replaceZipEntry(
            local + "/" + chain[3].name, entry: ".storebackup/manifest.json", file: work + "/manifest.json")
        let whole = try await repository().openDatabase(chain[3].name, path: "App.sqlite")
        defer { whole.close() }
        XCTAssertNil(try ArchiveReader(path: local + "/" + chain[3].name, backupName: chain[3].name).manifest?.pageDeltas)
        try checkRows(whole, as: chain[3].state, "\(chain[3].name), read whole")
    }

    func testEachPointOfAnEncryptedChainOfLargeDeltas() async throws {
        let chain = try makeChain(try passwordArguments)
        // Encrypted, level 0 deflates at level 0 (stored deflate blocks): every delta has its blocks.
        for link in chain.dropFirst() {
            let (row, entry) = try pageDelta(of: link.name, password: Self.password)
            XCTAssertTrue(entry.isEncrypted, link.name)
            XCTAssertGreaterThan(row.deflateBlockHashes?.count ?? 0, 1, link.name)
        }
        for link in chain {
            let database = try await repository(Self.password).openDatabase(link.name, path: "App.sqlite")
            defer { database.close() }
            try checkRows(database, as: link.state, link.name)
        }
        let tip = try await repository(Self.password).openDatabase(chain[3].name, path: "App.sqlite")
        defer { tip.close() }
        XCTAssertEqual(try tip.query("SELECT name FROM t WHERE id = 31999").first?.rows, [[.text("night 2 31999")]])
        XCTAssertLessThanOrEqual(tip.readStatistics.blocksRead, 8, "\(tip.readStatistics)")
        do {
            _ = try await repository("wrong").openDatabase(chain[3].name, path: "App.sqlite")
            XCTFail("opened with a wrong password")
        } catch StoreBackupError.wrongPassword {}
    }

    /// The chain on S3 through the fault proxy (a reset answer on the way): the tip's lookup
    /// fetches the directories, manifests and page maps of the chain and a few blocks.
    func testARemoteChainIsReadInRanges() async throws {
        let chain = try makeChain(storedSecond: false)
        let servers = try TestServers(label: "look-inside-chain-s3")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let retry = RetryPolicy(budget: 60, initialDelay: 0.02, maximumDelay: 0.1)
        var total: Int64 = 0
        for link in chain {
            let copy = work + "/upload.zip"
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: local + "/" + link.name, toPath: copy)
            total += Int64(try FileSystem.lstatInfo(copy).st_size)
            try await backend.make("look", nil, retry).upload(file: copy, as: link.name, progress: nil)
        }
        let zipGET: [String: Any] = ["method": "GET", "path_contains": "incremental"]
        let proxy = try ContractProxy(
            servers: servers, backend: backend,
            rules: [zipGET.merging(["requests": [4], "fault": "reset", "phase": "response", "after_bytes": 1000]) { $1 }], work: work)
        let remote = BackupRepository(destination: try backend.make("look", proxy.port, retry))
        let database = try await remote.openDatabase("latest", path: "App.sqlite")
        XCTAssertEqual(
            try database.query("SELECT name, length(body) FROM t WHERE id = 25001").first?.rows, [[.text("night 2 25001"), .integer(120)]])
        XCTAssertEqual(
            try database.query("SELECT name FROM t WHERE id = \(Self.rows + 2999)").first?.rows, [[.text("night 3 2999")]])
        let fetched = try XCTUnwrap(database.readStatistics.fetchedBytes)
        database.close()
        XCTAssertLessThan(fetched, total / 5, "fetched \(fetched) of the chain's \(total) bytes")
        let gets = proxy.entries().filter { ($0["request"] as? String)?.hasPrefix("GET") == true }
        XCTAssertEqual(ContractProxy.faults(gets).count, 1, "the fault struck")
        // Every point, remote, as the store was.
        for link in chain {
            let point = try await remote.openDatabase(link.name, path: "App.sqlite")
            defer { point.close() }
            try checkRows(point, as: link.state, link.name)
        }
    }

    /// A database that shrinks (VACUUM) and then grows again past its old size: pages an older
    /// delta wrote beyond a later, smaller page count are not served, and each point reads as
    /// the store was.
    func testADatabaseThatShrinksThenGrows() async throws {
        var chain = [(try create([]), try snapshot(0))]
        try update("UPDATE t SET body = hex(randomblob(60)) WHERE id % 3 = 0 AND id > 30000")
        chain.append((try create([]), try snapshot(1)))
        try update("DELETE FROM t WHERE id > 20000")
        try update("VACUUM")
        chain.append((try create([]), try snapshot(2)))
        try update(
            """
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 35000)
            INSERT INTO t(name, body) SELECT 'regrown ' || x, hex(randomblob(60)) FROM c;
            """)
        chain.append((try create([]), try snapshot(3)))
        XCTAssertEqual(chain.filter { BackupName.isIncremental($0.0) }.count, 3, "\(chain.map(\.0))")
        for link in chain {
            let database = try await repository().openDatabase(link.0, path: "App.sqlite")
            defer { database.close() }
            try checkRows(database, as: link.1, link.0)
        }
    }

    /// A flipped byte in one block of the tip's delta: opening reads only page maps and
    /// succeeds; a query that needs a page of that block fails with a clear error, never with
    /// wrong rows; queries that need only other blocks still answer.
    func testADamagedDeltaBlockFailsOnlyTheQueriesThatNeedIt() async throws {
        let chain = try makeChain()
        let tip = chain[3].name, path = local + "/" + tip
        let (row, entry) = try pageDelta(of: tip)
        let blocks = try XCTUnwrap(row.deflateBlocks)
        let file = try XCTUnwrap(LocalArchiveFile(path: path))
        let dataOffset = try LocalHeader.dataOffset(of: entry, in: file, centralNameLength: nil, backupName: tip)
        let damaged = blocks.count / 2
        let offset = dataOffset + Int64(blocks.prefix(damaged).reduce(0, +)) + Int64(blocks[damaged] / 2)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64(offset))
        let byte = try XCTUnwrap(handle.readData(ofLength: 1).first)
        try handle.seek(toOffset: UInt64(offset))
        handle.write(Data([byte ^ 0x40]))
        try handle.close()

        let database = try await repository().openDatabase(tip, path: "App.sqlite")
        defer { database.close() }
        XCTAssertThrowsError(try database.query("SELECT count(*), sum(length(body)) FROM t")) { error in
            guard case StoreBackupError.damagedBlock(let name, let what, let block, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual([name, what], [tip, "the page delta of App.sqlite"])
            XCTAssertEqual(block, damaged)
            XCTAssertTrue(
                "\(error)".contains("block \(damaged) of the page delta of App.sqlite in backup \"\(tip)\" is damaged"), "\(error)")
        }
        let expected = try SQLiteConnection(path: chain[3].state, mode: .immutable)
        defer { expected.close() }
        var answered = 0
        for id in [1, 2, 50, 300, 1000, 3000, 9000, 25001, 45000, Self.rows + 200] {
            let want = try expected.rows("SELECT name, body FROM t WHERE id = \(id)", operation: "read")
            do {
                let found = try database.query("SELECT name, body FROM t WHERE id = \(id)").first?.rows ?? []
                XCTAssertEqual(found.map { $0.map { if case .text(let text) = $0 { text } else { "?" } } }, want, "never a wrong row")
                answered += 1
            } catch StoreBackupError.damagedBlock {}
        }
        XCTAssertGreaterThan(answered, 0, "a query that does not touch the damaged block answers")
        let command = try runStoreBackup(["sql", tip, "App.sqlite", "SELECT count(*), sum(length(body)) FROM t", "--from", local])
        XCTAssertNotEqual(command.status, 0)
        XCTAssertTrue(command.stderr.contains("is damaged"), command.stderr)
        XCTAssertEqual(command.stdout, "")
    }
}
