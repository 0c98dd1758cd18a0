import Foundation
import XCTest

@testable import StoreBackup

/// Levels of restore points merge the points of a span into one incremental on the span's
/// base (``PointMerge``). Here storebackup's own `create --incremental` makes a real chain
/// (pages changed, files added, changed and removed, a folder added, a database that grows
/// then shrinks with VACUUM, one new in a middle point and patched after), the points are
/// merged onto the full, published in their place and deleted: the merged point restores to
/// exactly the tree the newest point restored to (by the independent walk of
/// Tests/Support/roundtrip_stores.py), and `verify` passes. Plain and encrypted chains; parts
/// that are not one chain are refused with nothing written; merged points merge again.
final class ChainCompactionMergeTests: XCTestCase {
    /// Each step's change to the store, through Python's sqlite3 (seeded payloads).
    private static let steps = [
        """
        os.makedirs(s + '/Attachments')
        write('Attachments/a.bin', 5000); write('Attachments/keep.bin', 7000); write('notes.txt', 40)
        os.symlink('notes.txt', s + '/notes-link')
        db = sqlite3.connect(s + '/App.sqlite')
        db.execute('CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, payload BLOB)'); insert(db, 1500); db.commit()
        g = sqlite3.connect(s + '/Growing.sqlite')
        g.execute('CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)'); insert(g, 100, 't'); g.commit()
        kept = sqlite3.connect(s + '/Settings.sqlite')
        kept.execute('CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)'); insert(kept, 20, 't'); kept.commit()
        """,
        """
        db = sqlite3.connect(s + '/App.sqlite'); touch(db)
        g = sqlite3.connect(s + '/Growing.sqlite'); insert(g, 300, 't'); g.commit()
        write('Attachments/b.bin', 3000); write('notes.txt', 60); os.makedirs(s + '/NewFolder/Inner')
        """,
        """
        db = sqlite3.connect(s + '/App.sqlite'); touch(db)
        g = sqlite3.connect(s + '/Growing.sqlite'); insert(g, 300, 't'); g.commit()
        late = sqlite3.connect(s + '/Late.sqlite')
        late.execute('CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)'); insert(late, 1300, 't'); late.commit()
        os.remove(s + '/Attachments/a.bin'); write('NewFolder/c.txt', 900)
        """,
        """
        db = sqlite3.connect(s + '/App.sqlite'); touch(db)
        g = sqlite3.connect(s + '/Growing.sqlite'); g.execute('DELETE FROM t WHERE id > 50'); g.commit(); g.execute('VACUUM')
        late = sqlite3.connect(s + '/Late.sqlite'); touch(late, 't')
        """,
        """
        late = sqlite3.connect(s + '/Late.sqlite'); touch(late, 't'); insert(late, 40, 't'); late.commit()
        g = sqlite3.connect(s + '/Growing.sqlite'); insert(g, 30, 't'); g.commit()
        write('Attachments/b.bin', 3100)
        """,
    ]

    private static func script(_ store: String, step: Int) -> String {
        """
        import os, random, sqlite3
        s = '\(store)'
        rng = random.Random(\(step))
        def write(name, size):
            with open(s + '/' + name, 'wb') as f: f.write(rng.randbytes(size))
        def insert(db, count, table='items'):
            cols = '(name, payload)' if table == 'items' else '(payload)'
            rows = [(('row %d' % n), rng.randbytes(900)) if table == 'items' else (rng.randbytes(900),) for n in range(count)]
            db.executemany('INSERT INTO %s%s VALUES (%s)' % (table, cols, ', '.join('?' * len(rows[0]))), rows)
        def touch(db, table='items'):
            for key in range(1, 40):
                db.execute('UPDATE %s SET payload = ? WHERE id = ?' % table, (rng.randbytes(900), key * 7))
            db.commit()
        \(Self.steps[step])
        """
    }

    /// A chain made by create: the full, then the points, each with the tree it restores to.
    private struct Chain {
        let work: String
        let store: String
        let backups: String
        let environment: [String: String]
        /// `--password-file FILE` for an encrypted chain.
        let options: [String]
        let password: BackupPassword?
        var names: [String] = []

        var full: String { names[0] }
        var points: [String] { Array(names.dropFirst()) }
        func path(_ name: String) -> String { backups + "/" + name }
    }

    private func makeChain(encrypted: Bool) throws -> Chain {
        let work = try TestEnvironment.temporaryDirectory("compaction-merge")
        let store = work + "/Stores", backups = work + "/backups"
        for folder in [store, backups, work + "/tmp", work + "/out"] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }
        var options: [String] = []
        var password: BackupPassword?
        if encrypted {
            let file = work + "/password"
            XCTAssertTrue(
                FileManager.default.createFile(
                    atPath: file, contents: Data("merge password\n".utf8), attributes: [.posixPermissions: 0o600]))
            options = ["--password-file", file]
            password = try BackupPassword("merge password")
        }
        var chain = Chain(
            work: work, store: store, backups: backups, environment: ["HOME": work, "TMPDIR": work + "/tmp"], options: options,
            password: password)
        for step in Self.steps.indices {
            let worked = try runTool("/usr/bin/env", ["python3", "-c", Self.script(store, step: step)])
            XCTAssertEqual(worked.status, 0, "step \(step): \(worked.stderr)")
            chain.names.append(try create(chain, extra: encrypted ? ["--encrypt"] : []))
            XCTAssertEqual(BackupName.isIncremental(chain.names[step]), step > 0, chain.names[step])
        }
        return chain
    }

    /// Runs create --incremental on the chain's store; returns the new backup's name.
    private func create(_ chain: Chain, extra: [String] = []) throws -> String {
        let before = Set(try FileManager.default.contentsOfDirectory(atPath: chain.backups))
        let created = try runStoreBackup(
            ["create", chain.store, "--to", chain.backups, "--incremental", "--max-delta-share", "1"] + extra + chain.options,
            environment: chain.environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let new = Set(try FileManager.default.contentsOfDirectory(atPath: chain.backups)).subtracting(before)
        return try XCTUnwrap(new.count == 1 ? new.first : nil, "create published \(new.sorted())")
    }

    /// Restores `name` into a new folder and returns its tree.
    private func restoredTree(_ chain: Chain, _ name: String) throws -> [String: [String: AnyHashable]] {
        let target = chain.work + "/restored-\(UUID().uuidString.prefix(8))"
        defer { try? FileSystem.removeTree(target) }
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        let restore = try runStoreBackup(
            ["restore", name, target + "/Stores", "--from", chain.backups, "--yes"] + chain.options, environment: chain.environment)
        XCTAssertEqual(restore.status, 0, "restore \(name): \(restore.stderr)")
        return try RoundTripTests.describe(target + "/Stores")
    }

    private func base(_ chain: Chain, _ name: String, at path: String? = nil) throws -> PointMergeBase {
        let reader = try ArchiveReader(path: path ?? chain.path(name), backupName: name, passwords: chain.password.map { .fixed($0) })
        return PointMergeBase(
            name: name, manifest: try XCTUnwrap(reader.manifest), manifestSHA256: try XCTUnwrap(reader.manifestSHA256))
    }

    private func merge(_ chain: Chain, parts: [String], onto base: PointMergeBase, into output: String) throws -> Manifest {
        try PointMerge.merge(
            parts: parts, onto: base, password: chain.password, into: output, scratchDirectory: chain.work + "/tmp",
            compressionLevel: 1, cancel: CancellationFlag())
    }

    /// The merged point's name: a second after the newest point, on the full.
    private func mergedName(_ chain: Chain) throws -> String {
        let newest = try XCTUnwrap(BackupName.date(of: try XCTUnwrap(chain.points.last)))
        return try XCTUnwrap(BackupName.makeIncremental(for: newest.addingTimeInterval(1), base: chain.full))
    }

    /// Merges every point onto the full, publishes the merged point in their place, deletes
    /// them, and checks that it restores to the newest point's tree and verifies. Returns that tree.
    @discardableResult
    private func assertMergedPointReplacesThePoints(_ chain: Chain) async throws -> [String: [String: AnyHashable]] {
        let expected = try restoredTree(chain, try XCTUnwrap(chain.points.last))
        XCTAssertGreaterThan(expected.count, 10, "the newest point's tree")
        let output = chain.work + "/out/merged.zip"
        let started = Date()
        let manifest = try merge(chain, parts: chain.points.map(chain.path), onto: try base(chain, chain.full), into: output)
        print("merged \(chain.points.count) points in \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: chain.work + "/tmp").filter { $0.hasPrefix(ScratchFiles.prefix) }, [])

        let newest = try XCTUnwrap(
            try ArchiveReader(
                path: chain.path(try XCTUnwrap(chain.points.last)), backupName: "newest", passwords: chain.password.map { .fixed($0) }
            ).manifest)
        XCTAssertEqual(manifest.kind, "incremental")
        XCTAssertEqual(manifest.base?.name, chain.full)
        XCTAssertEqual(manifest.chainLength, 1)
        XCTAssertEqual(manifest.createdAt, newest.createdAt)
        XCTAssertEqual(manifest.hashSalt, newest.hashSalt)
        XCTAssertEqual(manifest.format, 4, "Late.sqlite is stored whole in blocks, with their hashes")
        XCTAssertEqual(chain.password == nil, manifest.hashSalt == nil)
        let sources = Dictionary(manifest.files.map { ($0.path, $0.source ?? "whole") }, uniquingKeysWith: { first, _ in first })
        XCTAssertEqual(sources["App.sqlite"], "pages", "patched since the full: one merged delta")
        XCTAssertEqual(sources["Growing.sqlite"], "pages")
        XCTAssertEqual(sources["Settings.sqlite"], "pages", "unchanged: a delta of no pages")
        XCTAssertEqual(sources["Late.sqlite"], "whole", "new in a middle point, patched after: rebuilt whole")
        XCTAssertEqual(sources["Attachments/keep.bin"], "base")
        XCTAssertEqual(sources["Attachments/b.bin"], "whole")
        XCTAssertEqual(sources["NewFolder/c.txt"], "whole")
        XCTAssertNil(sources["Attachments/a.bin"])
        XCTAssertEqual(sources["NewFolder/Inner"], "whole")
        XCTAssertEqual(
            Set(manifest.pageMaps?.map { "\($0.path):\($0.complete)" } ?? []),
            ["App.sqlite:false", "Growing.sqlite:false", "Late.sqlite:true", "Settings.sqlite:false"])

        // Its merged deltas are listed with their sizes, as `sql` reads them in part.
        XCTAssertEqual(Set(manifest.pageDeltas?.map(\.path) ?? []), ["App.sqlite", "Growing.sqlite", "Settings.sqlite"])
        let written = try ArchiveReader(path: output, backupName: "merged", passwords: chain.password.map { .fixed($0) })
        for delta in manifest.pageDeltas ?? [] { XCTAssertEqual(delta.size, written.pageDeltas[delta.path]?.size, delta.path) }
        written.release()

        let name = try mergedName(chain)
        try FileManager.default.moveItem(atPath: output, toPath: chain.path(name))
        // Read in place, the merged point's databases hold the newest point's rows.
        let repository = BackupRepository(
            destination: try DestinationResolver.resolve(chain.backups), passwords: chain.password.map { .fixed($0) })
        for (path, table) in [("App.sqlite", "items"), ("Growing.sqlite", "t"), ("Settings.sqlite", "t")] {
            let merged = try await repository.openDatabase(name, path: path)
            let point = try await repository.openDatabase(try XCTUnwrap(chain.points.last), path: path)
            try merged.attach(point, as: "point")
            let differing = try merged.query(
                """
                SELECT count(*) FROM (SELECT * FROM main.\(table) EXCEPT SELECT * FROM point.\(table));
                SELECT count(*) FROM (SELECT * FROM point.\(table) EXCEPT SELECT * FROM main.\(table))
                """)
            XCTAssertEqual(differing.map(\.rows), [[[.integer(0)]], [[.integer(0)]]], path)
            merged.close()
        }
        for point in chain.points { try FileManager.default.removeItem(atPath: chain.path(point)) }
        let verified = try runStoreBackup(["verify", name, "--from", chain.backups] + chain.options, environment: chain.environment)
        XCTAssertEqual(verified.status, 0, "verify \(name): \(verified.stderr)")
        let after = try restoredTree(chain, name)
        XCTAssertTrue(after == expected, "the merged point restored differently: \(RoundTripTests.difference(expected, after))")
        return expected
    }

    func testMergedPointsOfAPlainChainRestoreAsTheNewestPoint() async throws {
        let chain = try makeChain(encrypted: false)
        defer { try? FileSystem.removeTree(chain.work) }
        let full = try base(chain, chain.full)
        let output = chain.work + "/out/refused.zip"
        let points = chain.points.map(chain.path)

        // Not the chain: out of order, onto another base than the first point's.
        XCTAssertThrowsError(try merge(chain, parts: [points[1], points[0]], onto: full, into: output))
        XCTAssertThrowsError(try merge(chain, parts: Array(points[1...]), onto: full, into: output))
        XCTAssertThrowsError(try merge(chain, parts: points, onto: try base(chain, chain.points[0]), into: output))
        XCTAssertFalse(FileSystem.fileExists(output))

        // Merged points merge again: the newest two onto the point before them, that with the
        // one before onto the first, and that with the first onto the full.
        let last2 = try merge(chain, parts: Array(points[2...]), onto: try base(chain, chain.points[1]), into: chain.work + "/out/m34.zip")
        XCTAssertEqual(last2.chainLength, 3)
        _ = try merge(
            chain, parts: [points[1], chain.work + "/out/m34.zip"], onto: try base(chain, chain.points[0]),
            into: chain.work + "/out/m234.zip")
        let twice = try merge(chain, parts: [points[0], chain.work + "/out/m234.zip"], onto: full, into: chain.work + "/out/again.zip")

        // A point of another chain (a new full, then an incremental on it).
        var other = chain
        other.names = [try create(chain, extra: ["--full"])]
        other.names.append(try create(other))
        XCTAssertThrowsError(try merge(chain, parts: [points[0], other.path(other.names[1])], onto: full, into: output)) { error in
            guard case StoreBackupError.brokenChain = error else { return XCTFail("\(error)") }
        }
        XCTAssertFalse(FileSystem.fileExists(output))
        for name in other.names { try FileManager.default.removeItem(atPath: other.path(name)) }

        let expected = try await assertMergedPointReplacesThePoints(chain)

        // The merge of merges holds the same tree, and restores the same too.
        let name = try mergedName(chain)
        let direct = try base(chain, name)
        XCTAssertEqual(
            twice.files.map { "\($0.path) \($0.type) \($0.size) \($0.sha256 ?? "") \($0.mode) \($0.mtime)" },
            direct.manifest.files.map { "\($0.path) \($0.type) \($0.size) \($0.sha256 ?? "") \($0.mode) \($0.mtime)" })
        try FileManager.default.removeItem(atPath: chain.path(name))
        try FileManager.default.moveItem(atPath: chain.work + "/out/again.zip", toPath: chain.path(name))
        let after = try restoredTree(chain, name)
        XCTAssertTrue(after == expected, "the merge of merges restored differently: \(RoundTripTests.difference(expected, after))")
    }

    func testMergedPointsOfAnEncryptedChainRestoreAsTheNewestPoint() async throws {
        let chain = try makeChain(encrypted: true)
        defer { try? FileSystem.removeTree(chain.work) }
        // Without the password nothing is read, and nothing written.
        let output = chain.work + "/out/refused.zip"
        XCTAssertThrowsError(
            try PointMerge.merge(
                parts: chain.points.map(chain.path), onto: try base(chain, chain.full), password: nil, into: output,
                scratchDirectory: chain.work + "/tmp", compressionLevel: 1, cancel: CancellationFlag()))
        XCTAssertFalse(FileSystem.fileExists(output))
        try await assertMergedPointReplacesThePoints(chain)
    }
}
