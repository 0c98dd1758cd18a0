import Foundation
import XCTest

@testable import StoreBackup

/// The store the diff tests back up and change: App.sqlite in WAL mode with a rowid table of
/// `rows` rows and an index, a table keyed by text, a WITHOUT ROWID table and one that never
/// changes (plus `extraSQL`), backed up to a local folder by the command line.
struct DiffStore {
    let work: String
    var store: String { work + "/Stores" }
    var local: String { work + "/local" }

    init(work: String, rows: Int, extraSQL: String = "") throws {
        self.work = work
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        try update(
            """
            PRAGMA journal_mode=wal;
            CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows))
            INSERT INTO t SELECT x, 'name ' || x, hex(randomblob(60)) FROM c;
            CREATE INDEX t_name ON t(name);
            CREATE TABLE k(code TEXT PRIMARY KEY, value INTEGER);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000)
            INSERT INTO k SELECT 'code-' || x, x FROM c;
            CREATE TABLE w(a INTEGER, b TEXT, PRIMARY KEY(a, b)) WITHOUT ROWID;
            INSERT INTO w VALUES (1, 'x'), (2, 'y');
            CREATE TABLE quiet(id INTEGER PRIMARY KEY, note TEXT);
            INSERT INTO quiet VALUES (1, 'never changes');
            \(extraSQL)
            """, create: true)
    }

    /// Runs `sql` on the store's App.sqlite.
    func update(_ sql: String, create: Bool = false) throws {
        let db = try SQLiteConnection(path: store + "/App.sqlite", mode: create ? .create : .readWrite)
        try db.execute(sql, operation: "update")
        db.close()
    }

    /// `storebackup create` of the store to the local folder with `options`; the new name.
    func backup(_ options: [String] = []) throws -> String {
        // Names are by the second.
        Thread.sleep(forTimeInterval: 1.1)
        let created = try runStoreBackup(["create", store, "--to", local] + options, environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines).components(separatedBy: "\n").last ?? ""
    }

    /// The diff of the two backups' App.sqlite extracted whole (through `repository`), by the same differ.
    func extractedDiff(_ older: String, _ newer: String, from repository: BackupRepository) async throws -> DatabaseDiff {
        var paths: [String] = []
        for name in [older, newer] {
            let folder = work + "/extract-\(paths.count)"
            _ = try await repository.extract(name, paths: ["App.sqlite"], into: folder)
            paths.append(folder + "/App.sqlite")
        }
        defer { paths.forEach { try? FileManager.default.removeItem(atPath: ($0 as NSString).deletingLastPathComponent) } }
        let differ = try RowDiffer(older: paths[0], newer: paths[1])
        defer { differ.close() }
        return try differ.compare(path: "App.sqlite", includeUnchanged: true, keepRows: 1_000_000)
    }
}
