import Foundation
import XCTest

@testable import StoreBackup

/// The row diff against `sqldiff` on generated pairs of databases, and the SQL that brings
/// rows back, applied with the `sqlite3` shell.
final class RowDiffTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("rowdiff")
        for tool in ["/usr/bin/sqldiff", "/usr/bin/sqlite3"] where !FileManager.default.fileExists(atPath: tool) {
            throw XCTSkip("\(tool) is missing (scripts/install-deps installs sqlite3-tools)")
        }
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// Seeded pairs: updates, deletes, inserts, key changes, a NOCASE key whose case
    /// changes, WITHOUT ROWID and composite keys, a table without a primary key, a text key
    /// in a rowid table, blobs, NULLs, reals at the edges, text with quotes and newlines, a
    /// column added, a table dropped, one created, an index added and one dropped.
    static let generator = """
        import random, sqlite3, sys
        seed, older, newer = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        r = random.Random(seed)
        def value():
            kind = r.randrange(7)
            if kind == 0: return None
            if kind == 1: return r.randint(-2**63, 2**63 - 1)
            if kind == 2: return r.choice([0.1, 1e308, -1e-300, 5e-324, 1/3, 2.5, -0.5, 123456789.125, r.random()])
            if kind == 3: return r.choice(["it's", "two\\nlines", 'say "hi"', "", "ünïcode ✓", "x" * r.randrange(300)])
            if kind == 4: return bytes(r.randrange(256) for _ in range(r.randrange(40)))
            if kind == 5: return r.randint(-1000, 1000)
            return "t%d" % r.randrange(10**6)
        db = sqlite3.connect(older)
        db.executescript('''
            CREATE TABLE t_int(id INTEGER PRIMARY KEY, a, b TEXT, c REAL, d BLOB);
            CREATE INDEX t_int_b ON t_int(b);
            CREATE TABLE t_text(k TEXT PRIMARY KEY NOT NULL, v);
            CREATE TABLE t_wr(x INT, y TEXT, z, PRIMARY KEY(x, y)) WITHOUT ROWID;
            CREATE TABLE t_nopk(p, q);
            CREATE TABLE t_nocase(name TEXT COLLATE NOCASE PRIMARY KEY, n) WITHOUT ROWID;
            CREATE TABLE t_alter(id INTEGER PRIMARY KEY, v);
            CREATE TABLE t_drop(id INTEGER PRIMARY KEY, v);
            CREATE INDEX t_wr_z ON t_wr(z);
        ''')
        for i in range(300):
            db.execute("INSERT INTO t_int VALUES(?,?,?,?,?)", (i * 3, value(), value(), value(), value()))
            db.execute("INSERT OR IGNORE INTO t_text VALUES(?,?)", ("key %d '%d'" % (i, r.randrange(9)), value()))
            db.execute("INSERT OR IGNORE INTO t_wr VALUES(?,?,?)", (r.randrange(50), "y%d" % r.randrange(20), value()))
            db.execute("INSERT INTO t_nopk VALUES(?,?)", (value(), value()))
            db.execute("INSERT OR IGNORE INTO t_nocase VALUES(?,?)", ("name%d" % i, value()))
            db.execute("INSERT INTO t_alter VALUES(?,?)", (i, value()))
            db.execute("INSERT INTO t_drop VALUES(?,?)", (i, value()))
        db.commit(); db.close()
        import shutil; shutil.copy(older, newer)
        db = sqlite3.connect(newer)
        for table, key in [("t_int", "id"), ("t_text", "k"), ("t_wr", "x"), ("t_nopk", "rowid"), ("t_nocase", "name")]:
            keys = [row[0] for row in db.execute("SELECT %s FROM %s" % (key, table))]
            for k in r.sample(keys, len(keys) // 20):
                db.execute("DELETE FROM %s WHERE %s = ?" % (table, key), (k,))
            keys = [row[0] for row in db.execute("SELECT %s FROM %s" % (key, table))]
            for k in r.sample(keys, len(keys) // 10):
                column = {"t_int": r.choice("abcd"), "t_text": "v", "t_wr": "z", "t_nopk": r.choice("pq"), "t_nocase": "n"}[table]
                db.execute("UPDATE %s SET %s = ? WHERE %s = ?" % (table, column, key), (value(), k))
        for i in range(25):
            db.execute("INSERT INTO t_int VALUES(?,?,?,?,?)", (10**6 + i, value(), value(), value(), value()))
            db.execute("INSERT OR IGNORE INTO t_text VALUES(?,?)", ("new %d" % i, value()))
            db.execute("INSERT OR IGNORE INTO t_wr VALUES(?,?,?)", (100 + i, "y", value()))
            db.execute("INSERT INTO t_nopk VALUES(?,?)", (value(), value()))
        db.execute("UPDATE t_int SET id = id + 1 WHERE id IN (3, 6, 9)")
        db.execute("UPDATE t_nocase SET name = upper(name) WHERE name IN ('name1', 'name2')")
        db.execute("UPDATE t_int SET c = 1 WHERE id = 12")  # REAL affinity: stored as 1.0 anyway
        db.execute("UPDATE t_int SET a = 7.0 WHERE id = 15")
        db.execute("UPDATE t_int SET a = 7 WHERE id = 18")
        db.executescript('''
            ALTER TABLE t_alter ADD COLUMN extra DEFAULT 5;
            UPDATE t_alter SET extra = 'changed' WHERE id % 7 = 0;
            DROP TABLE t_drop;
            CREATE TABLE t_new(a TEXT PRIMARY KEY, b) WITHOUT ROWID;
            INSERT INTO t_new VALUES('one', 1), ('two', x'0102');
            CREATE INDEX t_text_v ON t_text(v);
            DROP INDEX t_wr_z;
        ''')
        db.commit(); db.close()
        """

    /// Every table (not SQLite's own) with its SQL and its rows as sorted (type, value)
    /// tuples, reals exact; every index, trigger and view's SQL too. With `round15`, as
    /// `sqldiff` can reproduce it: reals to the 15 digits it writes, and no table SQL (an
    /// added column comes back without its DEFAULT clause).
    static let canonical = """
        import json, sqlite3, sys
        db = sqlite3.connect(sys.argv[1]); skip = sys.argv[2].split(","); round15 = sys.argv[3] == "1"
        def form(v):
            if isinstance(v, float): return ["real", ("%.15g" % v) if round15 else repr(v)]
            if isinstance(v, bytes): return ["blob", v.hex()]
            return [type(v).__name__, v]
        out = {}
        for name, sql, kind in db.execute("SELECT name, sql, type FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name"):
            if name in skip: continue
            if kind != "table":
                out[name] = sql; continue
            rows = sorted(json.dumps([form(v) for v in row]) for row in db.execute("SELECT * FROM \\"%s\\"" % name))
            out[name] = [None if round15 else sql, rows]
        print(json.dumps(out, sort_keys=True))
        """

    /// The names whose canonical forms differ (a short failure message instead of two dumps).
    func differing(_ left: String, _ right: String) throws -> [String] {
        let a = try JSONSerialization.jsonObject(with: Data(left.utf8)) as? [String: Any] ?? [:]
        let b = try JSONSerialization.jsonObject(with: Data(right.utf8)) as? [String: Any] ?? [:]
        return Set(a.keys).union(b.keys).sorted().filter { key in
            guard let x = a[key], let y = b[key] else { return true }
            let encode = { (value: Any) in try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed, .sortedKeys]) }
            return encode(x) != encode(y)
        }
    }

    func canonical(_ database: String, skipping: [String] = [], round15: Bool = false) throws -> String {
        let result = try runTool(
            "/usr/bin/env", ["python3", "-c", Self.canonical, database, skipping.joined(separator: ","), round15 ? "1" : "0"])
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout
    }

    /// `sql` applied with the sqlite3 shell to a copy of `database` at `copy`.
    func apply(_ sql: String, to database: String, copy: String) throws {
        try? FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: database, toPath: copy)
        let result = try runTool("/usr/bin/sqlite3", ["-bail", copy], stdin: sql)
        XCTAssertEqual(result.status, 0, "applying SQL failed: \(result.stderr)")
    }

    func undoSQL(backup: String, live: String, tables: [String] = [], filter: String? = nil) throws -> String {
        let differ = try RowDiffer(older: backup, newer: live)
        var statements: [String] = []
        try differ.undoSQL(tables: tables, filter: filter) { statements.append($0) }
        return statements.joined(separator: "\n") + "\n"
    }

    func testSQLBringsTheOlderDatabaseToTheNewerOneAsSqldiffDoes() throws {
        for seed in 1...3 {
            let older = work + "/older-\(seed).db", newer = work + "/newer-\(seed).db"
            try runPythonScript(Self.generator, [String(seed), older, newer])
            let target = try canonical(newer)

            // Ours, asked to bring `older` (as if live) to `newer` (as if the backup).
            let ours = try undoSQL(backup: newer, live: older)
            try apply(ours, to: older, copy: work + "/ours.db")
            XCTAssertEqual(try differing(try canonical(work + "/ours.db"), target), [], "seed \(seed): our SQL")

            // sqldiff's SQL turns `older` into `newer` too, but not exactly: it writes reals
            // with 15 digits (1/3 comes back as 0.333333333333333), adds a column without its
            // DEFAULT, and where a NOCASE key's case changed it compares with the column's
            // collation and misses the change.
            let sqldiff = try runTool("/usr/bin/sqldiff", [older, newer])
            XCTAssertEqual(sqldiff.status, 0, sqldiff.stderr)
            try apply(sqldiff.stdout, to: older, copy: work + "/sqldiff.db")
            let indexes = ["t_int_b", "t_text_v", "t_wr_z"]  // sqldiff leaves indexes alone
            XCTAssertEqual(
                try differing(
                    try canonical(work + "/sqldiff.db", skipping: ["t_nocase"] + indexes, round15: true),
                    try canonical(newer, skipping: ["t_nocase"] + indexes, round15: true)), [], "seed \(seed): sqldiff's SQL")

            // The counts agree with sqldiff's (keyed by primary key) on every table whose
            // definition is the same on both sides.
            let diff = try RowDiffer(older: older, newer: newer).compare(includeUnchanged: true)
            let summary = try runTool("/usr/bin/sqldiff", ["--primarykey", "--summary", older, newer])
            for table in diff.tables where ["t_int", "t_text", "t_wr", "t_nopk"].contains(table.name) {
                let line = summary.stdout.split(separator: "\n").first { $0.hasPrefix(table.name + ":") } ?? ""
                let ours = "\(table.name): \(table.changed) changes, \(table.inserted) inserts, \(table.deleted) deletes,"
                XCTAssertTrue(line.hasPrefix(ours), "seed \(seed): sqldiff says \(line), we say \(ours)")
                XCTAssertTrue(table.hasChanges, table.name)
            }
            // Counting alone (deleted and changed from one scan) counts as listing the rows does.
            let listed = try RowDiffer(older: older, newer: newer).compare(includeUnchanged: true, keepRows: 1)
            XCTAssertEqual(
                listed.tables.map { "\($0.name) \($0.inserted) \($0.deleted) \($0.changed)" },
                diff.tables.map { "\($0.name) \($0.inserted) \($0.deleted) \($0.changed)" }, "seed \(seed)")
            let nocase = try XCTUnwrap(diff.tables.first { $0.name == "t_nocase" })
            XCTAssertEqual(nocase.comparison, .primaryKey)
            XCTAssertGreaterThanOrEqual(nocase.changed, 2, "a key whose case changed is a changed row")
            XCTAssertEqual(diff.tables.first { $0.name == "t_drop" }?.presence, .removed)
            XCTAssertEqual(diff.tables.first { $0.name == "t_new" }?.presence, .added)
            XCTAssertEqual(
                Set(diff.schemaChanges.map { "\($0.kind.rawValue) \($0.name)" }),
                ["changed t_alter", "removed t_drop", "added t_new", "added t_text_v", "removed t_wr_z"])
        }
    }

    func testSQLForOneTableRestoresOnlyThatTable() throws {
        let backup = work + "/backup.db", live = work + "/live.db"
        try runPythonScript(Self.generator, ["7", backup, live])
        // Reals at the edges and text the shell must read back exactly.
        let edges = try SQLiteConnection(path: backup, mode: .readWrite)
        try edges.execute(
            "INSERT INTO t_wr VALUES(-1, 'edge', 9e999), (-2, 'edge', -9e999), (-3, 'edge', 0.1), (-4, 'edge', 1e308), (-5, 'edge', 'a''b\nc')",
            operation: "edges")
        edges.close()
        for table in ["t_wr", "t_int", "t_nopk", "t_text"] {
            let sql = try undoSQL(backup: backup, live: live, tables: [table])
            try apply(sql, to: live, copy: work + "/restored.db")
            let others = ["t_int", "t_text", "t_wr", "t_nopk", "t_nocase", "t_alter", "t_new"].filter { $0 != table }
            let indexes = ["t_int_b", "t_text_v", "t_wr_z"]
            // The table is the backup's, rows and indexes...
            XCTAssertEqual(
                try differing(
                    try canonical(work + "/restored.db", skipping: others + ["t_drop"] + indexes),
                    try canonical(backup, skipping: others + ["t_drop"] + indexes)), [], table)
            // ...and every other table is the live one.
            XCTAssertEqual(
                try differing(
                    try canonical(work + "/restored.db", skipping: [table] + indexes), try canonical(live, skipping: [table] + indexes)),
                [], table)
        }
        // --where: only the selected rows come back; rows changed on one side only count.
        let sql = try undoSQL(backup: backup, live: live, tables: ["t_int"], filter: "id < 100")
        XCTAssertFalse(sql.contains("INDEX"), "--where touches rows only")
        try apply(sql, to: live, copy: work + "/restored.db")
        let query = "SELECT quote(id) || quote(a) || quote(b) || quote(c) || quote(d) FROM t_int WHERE id %@ 100 ORDER BY id"
        XCTAssertEqual(
            try rows(work + "/restored.db", String(format: query, "<")), try rows(backup, String(format: query, "<")))
        XCTAssertEqual(try rows(work + "/restored.db", String(format: query, ">=")), try rows(live, String(format: query, ">=")))
    }

    func rows(_ database: String, _ query: String) throws -> [String] {
        let connection = try SQLiteConnection(path: database, mode: .readOnly)
        return try connection.rows(query, operation: "test").map { $0.first ?? "" }
    }

    func testATableNoKeyNamesIsComparedWholeAndRefusedForSQL() throws {
        let older = work + "/a.db", newer = work + "/b.db"
        for (path, rows) in [(older, "(1,2,3),(4,5,6)"), (newer, "(1,2,3),(7,8,9)")] {
            let db = try SQLiteConnection(path: path, mode: .create)
            try db.execute("CREATE TABLE odd(rowid, _rowid_, oid); INSERT INTO odd VALUES \(rows);", operation: "make")
            db.close()
        }
        let differ = try RowDiffer(older: older, newer: newer)
        let table = try XCTUnwrap(try differ.compare().tables.first)
        XCTAssertEqual(table.comparison, .whole)
        XCTAssertEqual([table.inserted, table.deleted, table.changed], [1, 1, 0])
        XCTAssertNotNil(table.note)
        XCTAssertThrowsError(try differ.undoSQL { _ in }) { error in
            guard case .diffRefused(let reason) = error as? StoreBackupError else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("no primary key and no usable rowid"), reason)
        }
        XCTAssertThrowsError(try differ.compare(tables: ["missing"]))
    }

    /// A live database is read as one committed state: a write committed while the diff
    /// holds its read transaction is not seen.
    func testALiveDatabaseIsReadAsOneCommittedState() throws {
        let older = work + "/a.db", live = work + "/live.db"
        for path in [older, live] {
            let db = try SQLiteConnection(path: path, mode: .create)
            try db.execute(
                "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v); INSERT INTO t VALUES(1, 'x');", operation: "make")
            db.close()
        }
        let differ = try RowDiffer(older: older, newer: live)
        let writer = try SQLiteConnection(path: live, mode: .readWrite)
        try writer.execute("INSERT INTO t VALUES(2, 'y')", operation: "write")
        XCTAssertFalse(try differ.compare().hasChanges)
        differ.close()
        XCTAssertEqual(try RowDiffer(older: older, newer: live).compare().tables.first?.inserted, 1)
        writer.close()
    }
}
