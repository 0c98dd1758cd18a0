import Foundation
import XCTest

@testable import StoreBackup

/// `diff` between two points of one incremental chain reads only the rows on pages that
/// changed between them (``ChangedRowids``), and answers exactly as a diff of the two
/// databases extracted whole.
final class ChainDiffTests: XCTestCase {
    var work = ""
    var fixture: DiffStore!
    var store: String { fixture.store }
    var local: String { fixture.local }
    static let rows = 40_000

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("chain-diff")
        fixture = try DiffStore(
            work: work, rows: Self.rows,
            extraSQL: """
                CREATE TABLE big(id INTEGER PRIMARY KEY, blob BLOB);
                INSERT INTO big VALUES (1, randomblob(20000));
                """)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func update(_ sql: String) throws { try fixture.update(sql) }

    private func backup() throws -> String { try fixture.backup(["--incremental", "--max-delta-share", "1"]) }

    private var repository: BackupRepository {
        get throws { BackupRepository(destination: try DestinationResolver.resolve(local)) }
    }

    /// The diff of the two backups' databases extracted whole, by the same differ.
    private func extractedDiff(_ older: String, _ newer: String) async throws -> DatabaseDiff {
        try await fixture.extractedDiff(older, newer, from: try repository)
    }

    /// `copying`: through scratch copies, as for a large database, else read in place.
    /// `counting`: counts only, no rows kept.
    private func chainDiff(_ older: String, _ newer: String, copying: Bool = false, counting: Bool = false) async throws -> DatabaseDiff {
        let options = DiffOptions(database: "App.sqlite", keepRows: counting ? 0 : 1_000_000, includeUnchanged: true)
        var repository = try repository
        repository.diffCopyMinimumBytes = copying ? 0 : .max
        let diff = try await repository.diff(older, .backup(newer), options: options)
        return try XCTUnwrap(diff.databases.first)
    }

    func testTwoPointsOfAChainDiffAsTheirExtractedDatabases() async throws {
        let full = try backup()
        try update(
            """
            UPDATE t SET name = name || '.' WHERE id % 997 = 3;
            DELETE FROM t WHERE id BETWEEN 20000 AND 20100;
            INSERT INTO t(name, body) VALUES ('new 1', 'b'), ('new 2', NULL);
            UPDATE k SET value = -value WHERE code IN ('code-7', 'code-2500');
            INSERT INTO w VALUES (3, 'z');
            """)
        let first = try backup()
        try update(
            """
            UPDATE t SET body = NULL WHERE id = 5;
            UPDATE big SET blob = randomblob(20000) WHERE id = 1;
            """)
        let second = try backup()
        let listed = try await repository.list()
        XCTAssertEqual(listed.filter { $0.name.contains("incremental") }.count, 2, "\(listed.map(\.name))")

        // full -> first: narrowed to the changed rows' ranges.
        let older = try await repository.openDatabase(full, path: "App.sqlite")
        let newer = try await repository.openDatabase(first, path: "App.sqlite")
        let scopes = try XCTUnwrap(try ChangedRowids.scopes(older: older, newer: newer))
        older.close()
        newer.close()
        XCTAssertEqual(scopes["quiet"], [], "an unchanged table is not read")
        let ranges = try XCTUnwrap(scopes["t"])
        XCTAssertFalse(ranges.isEmpty)
        XCTAssertFalse(ranges.contains { $0.contains(Int64(Self.rows / 2 - 500)) && $0.contains(Int64(Self.rows / 2 + 500)) })
        XCTAssertNil(scopes["w"], "a WITHOUT ROWID table that changed is compared whole")
        for (older, newer) in [(full, first), (first, second), (full, second)] {
            let viaChain = try await chainDiff(older, newer)
            let extracted = try await extractedDiff(older, newer)
            XCTAssertEqual(viaChain, extracted, "\(older) -> \(newer)")
            let viaCopies = try await chainDiff(older, newer, copying: true)
            XCTAssertEqual(viaCopies, extracted, "\(older) -> \(newer), through scratch copies")
            let counted = try await chainDiff(older, newer, copying: true, counting: true)
            XCTAssertEqual(
                counted.tables.map { "\($0.name) \($0.inserted) \($0.deleted) \($0.changed)" },
                extracted.tables.map { "\($0.name) \($0.inserted) \($0.deleted) \($0.changed)" }, "\(older) -> \(newer), counted")
            XCTAssertTrue(viaChain.hasChanges)
            try? FileManager.default.removeItem(atPath: work + "/extract-0")
            try? FileManager.default.removeItem(atPath: work + "/extract-1")
        }
        // first -> second rewrote a row's overflow pages behind an unchanged leaf: not narrowed.
        let before = try await repository.openDatabase(first, path: "App.sqlite")
        let after = try await repository.openDatabase(second, path: "App.sqlite")
        XCTAssertNil(try ChangedRowids.scopes(older: before, newer: after))
        before.close()
        after.close()
    }

    /// Copying two points of one chain reads, of the newer, only the pages its deltas
    /// write, and lays over the older's copy exactly those whose bytes differ.
    func testCopiesOfTwoPointsLayOnlyTheChangedPagesOver() async throws {
        let full = try backup()
        try update("UPDATE t SET name = name || '!' WHERE id % 50 = 1; INSERT INTO t(name, body) VALUES ('tail', 'b');")
        let point = try backup()
        let older = try await repository.openDatabase(full, path: "App.sqlite")
        let newer = try await repository.openDatabase(point, path: "App.sqlite")
        defer {
            older.close()
            newer.close()
        }
        let written = try XCTUnwrap(newer.pagesChanged(since: older))
        let made = try ScratchCopies.make(older: older, newer: newer, changed: written, cancel: CancellationFlag())
        defer { made.remove() }
        let laid = try XCTUnwrap(made.changedPages)
        let copy = try XCTUnwrap(made.newer)
        XCTAssertFalse(laid.isEmpty)
        XCTAssertTrue(laid.isSubset(of: written), "only pages the delta writes are read")
        let pageSize = 4096
        XCTAssertEqual(copy.size, newer.size)
        for page in 1...Int(newer.size) / pageSize {
            let offset = Int64(page - 1) * Int64(pageSize)
            let newerBytes = try newer.bytes(at: offset, count: pageSize)
            XCTAssertEqual(try copy.bytes(at: offset, count: pageSize), newerBytes, "page \(page)")
            let olderBytes = Int64(page) * Int64(pageSize) > older.size ? nil : try older.bytes(at: offset, count: pageSize)
            let differs = olderBytes != newerBytes
            XCTAssertEqual(laid.contains(page), differs, "page \(page)")
        }
    }
}
