import Foundation
import XCTest

@testable import StoreBackup

/// A store driven through the executable for the kill tests of points and levels: the
/// app's changes, the commands (TMPDIR and HOME in `work`), and the checks after a kill:
/// everything listed verifies through its chain, a restore gives back a store's exact
/// contents, and no temporary of a dead process is left.
struct CrashCheckedStore {
    let work: String
    /// The app's connection, held open as a running app holds it.
    let app: SQLiteConnection?
    var store: String { work + "/Stores" }
    /// TMPDIR of every command, so what a kill leaves there can be seen.
    var scratch: String { work + "/tmp" }

    /// Where the points go: the command line's arguments and environment, and the local
    /// folder when there is one (its leftovers are checked).
    struct Target {
        var to: [String]
        var from: [String]
        var environment: [String: String]
        var folder: String?
    }

    /// One change of the app's data: rows updated, inserted and deleted, and some of the
    /// other files rewritten, added or removed.
    func write(_ step: Int) throws {
        let app = try XCTUnwrap(app)
        try app.execute(
            """
            BEGIN;
            UPDATE accounts SET balance = balance + \(step) WHERE id = \(step % StoreFixture.accountCount + 1);
            INSERT INTO log(note) VALUES('step \(step)');
            DELETE FROM log WHERE id = \(step * 7);
            COMMIT;
            """, operation: "writer")
        if step % 2 == 0 {
            let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
            defer { settings.close() }
            try settings.execute("UPDATE kv SET v = 'theme \(step)' WHERE k = 'theme'", operation: "writer")
        }
        if step % 3 == 0 {
            try Data("grocery list, step \(step)\n".utf8).write(to: URL(fileURLWithPath: store + "/notes.txt"))
        }
        let blobs = store + "/.App_SUPPORT/_EXTERNAL_DATA"
        try Data("blob of step \(step)\n".utf8).write(to: URL(fileURLWithPath: blobs + "/step-\(step)"))
        if step >= 2 { unlink(blobs + "/step-\(step - 2)") }
    }

    /// What a restore must bring back, by path: each database's dump (its schema and every
    /// row), each other file's bytes, each link's target; SQLite's journals left out.
    func contents(of root: String) throws -> [String: String] {
        let script = """
            import hashlib, json, os, sqlite3, sys
            root = sys.argv[1]; out = {}
            for folder, _, files in os.walk(root):
                for name in files:
                    path = os.path.join(folder, name); rel = os.path.relpath(path, root)
                    if name.endswith(("-wal", "-shm", "-journal")): continue
                    if os.path.islink(path): out[rel] = "link " + os.readlink(path); continue
                    with open(path, "rb") as f: data = f.read()
                    if data.startswith(b"SQLite format 3\\0"):
                        db = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
                        data = "\\n".join(db.iterdump()).encode(); db.close()
                    out[rel] = hashlib.sha256(data).hexdigest()
            print(json.dumps(out))
            """
        let result = try runTool("/usr/bin/env", ["python3", "-c", script, root])
        XCTAssertEqual(result.status, 0, result.stderr)
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: String] ?? [:]
    }

    func environment(_ extra: [String: String]) -> [String: String] {
        ["TMPDIR": scratch, "HOME": work].merging(extra) { $1 }
    }

    func run(_ arguments: [String], _ target: Target) throws -> CommandResult {
        try runStoreBackup(arguments, environment: environment(target.environment))
    }

    /// The names `list` shows, each of which must pass `verify` (an incremental through
    /// its whole chain), with no chain broken.
    func verifiedListing(_ target: Target, _ context: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> Set<String>
    {
        let list = try run(["list", "--json"] + target.from, target)
        XCTAssertEqual(list.status, 0, "\(context): \(list.stderr)", file: file, line: line)
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]] ?? []
        let names = Set(rows.compactMap { $0["name"] as? String })
        for row in rows where row["chainBroken"] as? Bool == true {
            XCTFail("\(context): \(row["name"] ?? "?") is listed with its chain broken", file: file, line: line)
        }
        let verify = try run(["verify", "--all", "--json"] + target.from, target)
        let results = try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [[String: Any]] ?? []
        XCTAssertEqual(verify.status, 0, "\(context): verify: \(verify.stdout)\(verify.stderr)", file: file, line: line)
        XCTAssertEqual(
            Set(results.compactMap { $0["name"] as? String }), names, "\(context): verified what is listed", file: file, line: line)
        for result in results where result["ok"] as? Bool != true {
            XCTFail("\(context): \(result["name"] ?? "?") fails verify: \(result["problem"] ?? "?")", file: file, line: line)
        }
        return names
    }

    /// What `list --json` says of backup `name`.
    func listedRow(_ name: String, _ target: Target) throws -> [String: Any] {
        let list = try run(["list", "--json"] + target.from, target)
        let rows = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]] ?? []
        return rows.first { $0["name"] as? String == name } ?? [:]
    }

    /// The contents (``contents(of:)``) of backup `name` restored into a new folder.
    func restoredContents(_ name: String, _ target: Target) throws -> [String: String] {
        let restored = work + "/restored"
        defer { try? FileSystem.removeTree(restored) }
        let result = try run(["restore", name, restored, "--yes"] + target.from, target)
        XCTAssertEqual(result.status, 0, "restore \(name): \(result.stderr)")
        return try contents(of: restored)
    }

    /// No temporary of a dead process anywhere a point makes them: beside the store, in
    /// TMPDIR, in the chain state folder, in a local destination.
    func assertNoLeftovers(_ target: Target, _ context: String, file: StaticString = #filePath, line: UInt = #line) {
        var folders = [work, scratch]
        if let folder = target.folder { folders.append(folder) }
        let chains = work + "/.Stores.storebackup-chains"
        folders += ((try? FileManager.default.contentsOfDirectory(atPath: chains)) ?? []).map { chains + "/" + $0 }
        for folder in folders {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            let left = names.filter { ScratchFiles.owner(of: $0).map(ScratchFiles.isDead) == true }
            XCTAssertEqual(left, [], "\(context): temporaries left in \(folder)", file: file, line: line)
        }
    }
}
