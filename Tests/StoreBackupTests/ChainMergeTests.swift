import Foundation
import XCTest

@testable import StoreBackup

/// A chain restore rebuilds each patched database in one pass, taking every page from the
/// newest delta that holds it (``PageDeltaMerge``). Here storebackup's own create makes the
/// chain (block-deflated databases of several blocks, checked while they are written) of a
/// database whose same rows change every night, which grows for two nights, then shrinks
/// below its first size, then grows again: every backup restores to its night's store, by
/// the independent walk of Tests/Support/roundtrip_stores.py (databases by their rows),
/// proven and checked.
final class ChainMergeTests: XCTestCase {
    /// Each night's change to App.sqlite, through Python's sqlite3 (seeded payloads).
    private static let nights = [
        "db.execute('CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, payload BLOB)'); insert(3000)",
        "touch(); insert(2000)",
        "touch(); insert(2000)",
        "touch(); db.execute('DELETE FROM items WHERE id > 1500'); db.commit(); db.execute('VACUUM')",
        "touch(); insert(700)",
    ]

    private static func script(_ store: String, night: Int, change: String) -> String {
        """
        import random, sqlite3
        rng = random.Random(\(night))
        db = sqlite3.connect('\(store)/App.sqlite')
        def insert(count):
            db.executemany('INSERT INTO items(name, payload) VALUES (?, ?)',
                           [('row %d' % n, rng.randbytes(900)) for n in range(count)])
        def touch():
            for key in range(1, 60):
                db.execute('UPDATE items SET payload = ?, name = name || ? WHERE id = ?', (rng.randbytes(900), '+', key))
        \(change)
        db.commit()
        db.close()
        """
    }

    func testSamePagesAndAGrowingThenShrinkingDatabaseRestoreEveryNight() throws {
        let work = try TestEnvironment.temporaryDirectory("chain-merge")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores", backups = work + "/backups"
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: store + "/notes.txt"))
        let environment = ["HOME": work, "TMPDIR": work + "/tmp"]
        var expected: [(name: String, tree: [String: [String: AnyHashable]])] = []
        var sizes: [Int64] = []

        for (night, change) in Self.nights.enumerated() {
            let worked = try runTool("/usr/bin/env", ["python3", "-c", Self.script(store, night: night, change: change)])
            XCTAssertEqual(worked.status, 0, "night \(night): \(worked.stderr)")
            sizes.append(try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: store + "/App.sqlite")[.size] as? Int64))
            let tree = try RoundTripTests.describe(store)
            let before = Set(try FileManager.default.contentsOfDirectory(atPath: backups))
            let created = try runStoreBackup(
                ["create", store, "--to", backups, "--incremental", "--max-delta-share", "1"], environment: environment)
            XCTAssertEqual(created.status, 0, "night \(night): \(created.stderr)")
            let name = try XCTUnwrap(Set(try FileManager.default.contentsOfDirectory(atPath: backups)).subtracting(before).first)
            XCTAssertEqual(BackupName.isIncremental(name), night > 0, name)
            expected.append((name, tree))
        }
        // The premise: more than one deflate block, grown, then shrunk below the first night.
        XCTAssertGreaterThan(sizes[0], Int64(2 * CompressionPipeline.blockSize))
        XCTAssertGreaterThan(sizes[2], sizes[1])
        XCTAssertGreaterThan(sizes[1], sizes[0])
        XCTAssertLessThan(sizes[3], sizes[0])
        XCTAssertGreaterThan(sizes[4], sizes[3])

        // Each night twice: proven (the patch hashes the blocks it patches) and checked (the
        // database read back beside integrity_check).
        for (night, backup) in expected.enumerated() {
            for checked in [false, true] {
                let restored = work + "/restored-\(night)/Stores"
                let result = try runStoreBackup(
                    ["restore", backup.name, restored, "--from", backups, "--yes", "--json"] + (checked ? ["--check-databases"] : []),
                    environment: environment)
                XCTAssertEqual(result.status, 0, "night \(night): \(result.stderr)")
                let report = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
                let proven = try XCTUnwrap(report["databasesProven"] as? [String])
                XCTAssertEqual(proven.contains("App.sqlite"), !checked, "night \(night): \(result.stdout)")
                let after = try RoundTripTests.describe(restored)
                XCTAssertTrue(after == backup.tree, "night \(night): \(RoundTripTests.difference(backup.tree, after))")
                try? FileSystem.removeTree(work + "/restored-\(night)")
            }
        }
    }
}
