import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// The page scan of a chained backup (reader, page hashers and whole-file hasher in a ring
/// of batches): on a database of more batches than the ring has slots, with one to four
/// threads, its page map, delta count and whole-file SHA-256 match python's, page by page.
final class DatabasePageScanTests: XCTestCase {
    var work = ""
    var database: String { work + "/App.sqlite" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("page-scan")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// Runs `script` with python3 (the database's path as argv[1]) and returns its stdout.
    func python(_ script: String, _ arguments: [String] = []) throws -> String {
        let result = try runTool("/usr/bin/python3", ["-c", script, database] + arguments)
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testScanMatchesAnIndependentHashOfEveryPage() throws {
        // About 9 MB in a rollback-journal database (the file is the snapshot): more 2 MiB
        // batches than the ring's slots, and a last batch that is not full.
        _ = try python(
            """
            import random, sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("PRAGMA page_size=4096")
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB)")
            rng = random.Random(35)
            db.executemany("INSERT INTO t(body) VALUES (?)", ((rng.randbytes(900),) for _ in range(9000)))
            db.commit()
            """)
        let baseMap = work + "/base.map"
        let baseQuick = work + "/base.quick"
        let baseCopy = work + "/base.sqlite"
        try FileManager.default.copyItem(atPath: database, toPath: baseCopy)
        do {
            let snapshot = try DatabaseSnapshot(path: database, relativePath: "App.sqlite", scratchDirectory: work)
            defer { snapshot.finish() }
            XCTAssertGreaterThan(snapshot.size, 4 << 21, "the database must span more batches than the ring holds")
            let result = try DatabasePageScan(hasher: .plain, workers: 2, cancel: CancellationFlag())
                .scan(snapshot, mapPath: baseMap, delta: nil, wholeFileSHA256: false, quick: .init(base: nil, outputPath: baseQuick))
            XCTAssertEqual(result.changedPages, snapshot.pageCount)
            XCTAssertEqual(result.pagesHashed, snapshot.pageCount)
            XCTAssertNil(result.sha256)
        }

        // Some rows changed, and rows added (new pages at the end).
        _ = try python(
            """
            import random, sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            rng = random.Random(7)
            for row in rng.sample(range(1, 9001), 300):
                db.execute("UPDATE t SET body = ? WHERE id = ?", (rng.randbytes(900), row))
            db.executemany("INSERT INTO t(body) VALUES (?)", ((rng.randbytes(900),) for _ in range(700)))
            db.commit()
            """)
        let expected = try python(
            """
            import hashlib, sys
            new = open(sys.argv[1], "rb").read()
            old = open(sys.argv[2], "rb").read()
            size = 4096
            pages = [new[i:i + size] for i in range(0, len(new), size)]
            changed = sum(1 for n, page in enumerate(pages) if old[n * size:(n + 1) * size] != page)
            hashes = b"".join(hashlib.sha256(page).digest()[:16] for page in pages)
            print(hashlib.sha256(new).hexdigest(), changed, hashlib.sha256(hashes).hexdigest())
            """, [baseCopy]
        ).split(separator: " ").map(String.init)
        XCTAssertEqual(expected.count, 3)

        // Each thread count, hashing every page, then with the base's quick map: the same
        // results, with only the changed (and new) pages hashed.
        for (workers, withQuick) in [(1, false), (2, false), (4, false), (1, true), (2, true), (3, true)] {
            let snapshot = try DatabaseSnapshot(path: database, relativePath: "App.sqlite", scratchDirectory: work)
            defer { snapshot.finish() }
            let run = "\(workers)\(withQuick ? "-quick" : "")"
            let base = try PageMapFile(path: baseMap)
            let output = DatabasePageScan.DeltaOutput(
                base: base, deltaPath: work + "/delta-\(run)", changedMapPath: work + "/changed-\(run)")
            let mapPath = work + "/map-\(run)"
            let quick = DatabasePageScan.QuickScan(
                base: withQuick ? (try QuickPageMapFile(path: baseQuick), base) : nil, outputPath: work + "/quick-\(run)")
            let result = try DatabasePageScan(hasher: .plain, workers: workers, cancel: CancellationFlag())
                .scan(snapshot, mapPath: mapPath, delta: output, wholeFileSHA256: true, quick: quick)
            XCTAssertEqual(
                String(result.pagesHashed), withQuick ? expected[1] : String(snapshot.pageCount), "pages hashed, \(run)")
            let quickMap = try QuickPageMapFile(path: work + "/quick-\(run)")
            XCTAssertEqual(quickMap.pages, snapshot.pageCount)
            let workers = run
            XCTAssertEqual(result.sha256, expected[0], "whole-file SHA-256, \(workers) workers")
            XCTAssertEqual(String(result.changedPages), expected[1], "changed pages, \(workers) workers")
            let map = try Data(contentsOf: URL(fileURLWithPath: mapPath))
            XCTAssertEqual(map.count, PageMapFormat.headerSize + snapshot.pageCount * PageMapFormat.hashSize)
            XCTAssertEqual(
                FileDigest.hex(SHA256.hash(data: map.dropFirst(PageMapFormat.headerSize))), expected[2],
                "page hashes, \(workers) workers")
            XCTAssertEqual(
                result.deltaSize, Int64(20 + result.changedPages * (4 + snapshot.pageSize)), "delta size, \(workers) workers")
        }
    }
}
