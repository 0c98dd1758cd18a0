import Foundation
import XCTest

@testable import StoreBackup

/// `diff` of two backups that are not points of one chain copies both databases into
/// `TMPDIR` (``ScratchCopies``), compares their pages and reads only the rows on pages that
/// differ: it must answer exactly as a diff of the two databases extracted whole.
final class ScratchCopyDiffTests: XCTestCase {
    var work = ""
    var fixture: DiffStore!
    var store: String { fixture.store }
    var local: String { fixture.local }
    static let rows = 40_000

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("scratch-diff")
        fixture = try DiffStore(work: work, rows: Self.rows)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func update(_ sql: String) throws { try fixture.update(sql) }

    private func backup() throws -> String { try fixture.backup() }

    /// The repository, copying every database however small.
    private var repository: BackupRepository {
        get throws {
            var repository = BackupRepository(destination: try DestinationResolver.resolve(local))
            repository.diffCopyMinimumBytes = 0
            return repository
        }
    }

    /// The diff of the two backups' databases extracted whole, by the same differ.
    private func extractedDiff(_ older: String, _ newer: String) async throws -> DatabaseDiff {
        try await fixture.extractedDiff(older, newer, from: try repository)
    }

    /// This process's scratch files left in `TMPDIR`.
    private var leftScratchFiles: [String] {
        let mine = ScratchFiles.prefix + "\(getpid())-diff-"
        return ((try? FileManager.default.contentsOfDirectory(atPath: ScratchFiles.temporaryDirectory)) ?? []).filter { $0.hasPrefix(mine) }
    }

    func testTwoFullsDiffAsTheirExtractedDatabases() async throws {
        let first = try backup()
        // Updates that lengthen rows all over the table (leaves split), deletes, inserts.
        try update(
            """
            UPDATE t SET name = name || ' was renamed to something longer' WHERE id % 397 = 3;
            UPDATE t SET body = NULL WHERE id % 1999 = 7;
            DELETE FROM t WHERE id BETWEEN 20000 AND 20100 OR id % 4001 = 11;
            INSERT INTO t(name, body) VALUES ('new 1', 'b'), ('new 2', NULL);
            INSERT INTO t(id, name, body) VALUES (20050, 'back in a deleted range', 'x');
            UPDATE k SET value = -value WHERE code IN ('code-7', 'code-2500');
            INSERT INTO w VALUES (3, 'z');
            """)
        let second = try backup()

        // The pages that differ narrow the comparison of t; quiet is not read at all.
        let older = try await repository.openDatabase(first, path: "App.sqlite")
        let newer = try await repository.openDatabase(second, path: "App.sqlite")
        XCTAssertNil(newer.pagesChanged(since: older), "two fulls are not points of one chain")
        let copies = try ScratchCopies.make(older: older, newer: newer, cancel: CancellationFlag())
        XCTAssertEqual(leftScratchFiles.count, 1, "the older copy; the newer one's pages are in an unlinked file")
        let changed = try XCTUnwrap(copies.changedPages)
        let scopes = try XCTUnwrap(try ChangedRowids.scopes(older: copies.older, newer: try XCTUnwrap(copies.newer), changed: changed))
        // Both copies hold every byte of their database.
        XCTAssertEqual(try copies.older.bytes(at: 0, count: Int(older.size)), try older.bytes(at: 0, count: Int(older.size)))
        let newerCopy = try XCTUnwrap(copies.newer)
        XCTAssertEqual(try newerCopy.bytes(at: 0, count: Int(newer.size)), try newer.bytes(at: 0, count: Int(newer.size)))
        XCTAssertLessThan(changed.count, Int(newer.size) / 4096 / 2, "most pages are the older copy's")
        copies.remove()
        older.close()
        newer.close()
        XCTAssertEqual(leftScratchFiles, [])
        XCTAssertEqual(scopes["quiet"], [], "an unchanged table is not read")
        let ranges = try XCTUnwrap(scopes["t"])
        XCTAssertFalse(ranges.isEmpty)
        XCTAssertNil(scopes["w"], "a WITHOUT ROWID table that changed is compared whole")

        let options = DiffOptions(database: "App.sqlite", keepRows: 1_000_000, includeUnchanged: true)
        let copiedDiff = try await repository.diff(first, .backup(second), options: options)
        let copied = try XCTUnwrap(copiedDiff.databases.first)
        let extracted = try await extractedDiff(first, second)
        XCTAssertEqual(copied, extracted)
        // Counting only (inserted rows counted on a second connection at the same time as
        // the rest): the same counts.
        let counting = DiffOptions(database: "App.sqlite", includeUnchanged: true)
        let counted = try await repository.diff(first, .backup(second), options: counting)
        XCTAssertEqual(
            try XCTUnwrap(counted.databases.first).tables.map { "\($0.name) \($0.inserted) \($0.deleted) \($0.changed)" },
            copied.tables.map { "\($0.name) \($0.inserted) \($0.deleted) \($0.changed)" })
        let t = try XCTUnwrap(copied.tables.first { $0.name == "t" })
        XCTAssertGreaterThan(t.changed, 100)
        XCTAssertEqual(t.inserted, 2, "id 20050 is deleted and inserted again: changed")
        XCTAssertGreaterThan(t.deleted, 100)
        XCTAssertEqual(leftScratchFiles, [], "the copies are removed")

        // Read in place, the same answer.
        var inPlace = try repository
        inPlace.diffCopyMinimumBytes = .max
        let readInPlace = try await inPlace.diff(first, .backup(second), options: options)
        XCTAssertEqual(readInPlace.databases.first, copied)

        // Against the live store (the backup's side copied): as read in place, SQL too.
        try update("UPDATE t SET name = 'live' WHERE id = 9")
        let live = DiffSide.live(storesDirectory: store)
        let liveCopied = try await repository.diff(second, live, options: options)
        let liveInPlace = try await inPlace.diff(second, live, options: options)
        XCTAssertEqual(liveCopied, liveInPlace)
        XCTAssertEqual(liveCopied.databases.first?.tables.first { $0.name == "t" }?.changed, 1)
        let statements = Locked<[[String]]>([[], []])
        let copying = try repository
        for (index, repository) in [copying, inPlace].enumerated() {
            try await repository.undoSQL(backup: second, storesDirectory: store, database: "App.sqlite", tables: ["t"]) { statement in
                statements.withLock { $0[index].append(statement) }
            }
        }
        XCTAssertEqual(statements.current[0], statements.current[1])
        XCTAssertTrue(statements.current[0].contains { $0.contains("'name 9'") }, "\(statements.current[0])")
        XCTAssertEqual(leftScratchFiles, [])
    }

    /// A block whose SHA-256 is the same in both fulls is not read on the newer side; the
    /// answer is the same.
    func testBlocksWithTheSameHashAreNotReadTwice() async throws {
        let first = try backup()
        try update("INSERT INTO quiet VALUES (2, 'changed once')")
        let second = try backup()
        let older = try await repository.openDatabase(first, path: "App.sqlite")
        let newer = try await repository.openDatabase(second, path: "App.sqlite")
        let copies = try ScratchCopies.make(older: older, newer: newer, cancel: CancellationFlag())
        let blocks = Int((newer.size + (1 << 20) - 1) >> 20)
        XCTAssertGreaterThan(blocks, 3)
        XCTAssertGreaterThanOrEqual(copies.sameBlocks, blocks - 2, "only the header's block and quiet's can differ")
        let newerCopy = try XCTUnwrap(copies.newer)
        XCTAssertEqual(try newerCopy.bytes(at: 0, count: Int(newer.size)), try newer.bytes(at: 0, count: Int(newer.size)))
        copies.remove()
        older.close()
        newer.close()
        let options = DiffOptions(database: "App.sqlite", keepRows: 1_000_000, includeUnchanged: true)
        let copied = try await repository.diff(first, .backup(second), options: options)
        let extracted = try await extractedDiff(first, second)
        XCTAssertEqual(copied.databases.first, extracted)
        XCTAssertEqual(extracted.tables.first { $0.name == "quiet" }?.inserted, 1)
        XCTAssertEqual(extracted.tables.filter(\.hasChanges).map(\.name), ["quiet"])
    }

    func testNoRoomInTMPDIRIsSaid() {
        let lack = ScratchCopies.lackOfSpace(for: Int64.max / 2)
        XCTAssertTrue(lack?.contains(ScratchFiles.temporaryDirectory) == true, lack ?? "nil")
    }
}
