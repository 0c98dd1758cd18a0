import Foundation
import XCTest

@testable import StoreBackup

/// Issue 35, points 4-6: chains read from names, and list, delete, prune and copy keeping
/// every incremental with its base. Chains are built by placing files under incremental
/// names in local folders: list, delete and copy read names and move bytes, so the contents
/// need not be real incrementals.
final class BackupChainTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("chains")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    static func date(_ day: Int, hour: Int = 2) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar.date(from: DateComponents(year: 2026, month: 11, day: day, hour: hour))!
    }

    static func full(_ day: Int) -> String { BackupName.make(for: date(day)) }
    static func incremental(_ day: Int, on base: String) -> String { BackupName.makeIncremental(for: date(day), base: base)! }

    /// F1 <- I2 <- I3, F1 <- I4; F5 <- I6; I9 on a base that is not there; F7 alone.
    let f1 = full(1)
    lazy var i2 = Self.incremental(2, on: f1)
    lazy var i3 = Self.incremental(3, on: i2)
    lazy var i4 = Self.incremental(4, on: f1)
    let f5 = full(5)
    lazy var i6 = Self.incremental(6, on: f5)
    let f7 = full(7)
    lazy var i9 = Self.incremental(9, on: Self.full(8))
    lazy var all = [f1, i2, i3, i4, f5, i6, f7, i9]

    func place(_ names: [String], in folder: String, size: Int = 64) throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for name in names {
            XCTAssertTrue(FileManager.default.createFile(atPath: folder + "/" + name, contents: Data(repeating: 5, count: size)))
        }
    }

    func names(in folder: String) throws -> Set<String> {
        Set(try FileManager.default.contentsOfDirectory(atPath: folder).filter(BackupName.isBackup))
    }

    // MARK: chains from names

    func testChainsFromNames() {
        let chains = BackupChains(names: all.shuffled())
        XCTAssertEqual(chains.backups.map(\.name), all.reversed(), "newest first")
        XCTAssertEqual(chains.base(of: i3), i2)
        XCTAssertNil(chains.base(of: f1))
        XCTAssertNil(chains.base(of: i9), "its base is not listed")
        XCTAssertEqual(chains.ancestors(of: i3), [f1, i2])
        XCTAssertEqual(chains.chain(of: i3), [f1, i2, i3])
        XCTAssertEqual(chains.chain(of: f7), [f7])
        XCTAssertEqual(chains.directDependents(of: f1), [i4, i2])
        XCTAssertEqual(chains.dependents(of: f1), [i4, i3, i2], "newest first: the order to delete them in")
        XCTAssertEqual(chains.dependents(of: i3), [])
        XCTAssertNil(chains.missingBase(of: i3))
        XCTAssertEqual(chains.missingBase(of: i9), "2026-11-08 020000")
        XCTAssertTrue(chains.isBroken(i9))
        XCTAssertFalse(chains.isBroken(f7))

        // A chain broken further down: every incremental above the gap is broken too.
        let cut = BackupChains(names: [i2, i3])
        XCTAssertEqual(cut.missingBase(of: i3), "2026-11-01 020000")
        XCTAssertEqual(cut.ancestors(of: i3), [i2])

        // A name that points at a base not older than itself has none: chains never loop.
        let forward = "2026-11-10 020000 incremental on 2026-11-11 020000 Stores.zip"
        let back = "2026-11-11 020000 incremental on 2026-11-10 020000 Stores.zip"
        let looped = BackupChains(names: [forward, back])
        XCTAssertEqual(looped.bases(of: forward), [])
        XCTAssertEqual(looped.bases(of: back), [forward])
        XCTAssertEqual(looped.dependents(of: back), [])

        // Two backups of the same second (two stores sharing a destination): both count as bases.
        let twin = "2026-11-01 020000 incremental on 2026-10-31 020000 Stores.zip"
        let shared = BackupChains(names: [f1, twin, i2])
        XCTAssertEqual(Set(shared.bases(of: i2)), [f1, twin])
        XCTAssertEqual(shared.dependents(of: twin), [i2])
    }

    /// Issue 47, finding 3: names an earlier version wrote after the clock was set back two
    /// hours (an incremental named before its base) or in a burst (an incremental named for
    /// its base's own second). They are read as chains, ordered with every incremental
    /// before its bases, and kept, deleted and picked as `latest` by that order.
    func testNamesOutOfOrderAreReadAsChains() async throws {
        let full = "2026-12-04 183614 Stores.zip"
        let back = "2026-12-04 163614 incremental on 2026-12-04 183614 Stores.zip"
        let next = "2026-12-04 163615 incremental on 2026-12-04 163614 Stores.zip"
        let same = "2026-12-04 183656 incremental on 2026-12-04 183656 Stores.zip"
        let sameBase = "2026-12-04 183656 Stores.zip"
        let chains = BackupChains(names: [full, back, next, sameBase, same].shuffled())
        XCTAssertEqual(chains.bases(of: back), [full])
        XCTAssertEqual(chains.bases(of: same), [sameBase])
        XCTAssertEqual(chains.chain(of: next), [full, back, next])
        XCTAssertFalse(chains.isBroken(next))
        XCTAssertEqual(chains.dependents(of: full), [next, back], "newest first: the order to delete them in")
        let order = chains.backups.map(\.name)
        XCTAssertLessThan(order.firstIndex(of: next)!, order.firstIndex(of: back)!)
        XCTAssertLessThan(order.firstIndex(of: back)!, order.firstIndex(of: full)!)
        XCTAssertLessThan(order.firstIndex(of: same)!, order.firstIndex(of: sameBase)!)

        // On a destination: latest is the newest of the later chain, delete refuses the base,
        // and keep-last 1 keeps the real newest with its chain.
        let folder = work + "/backups"
        try place([full, back, next], in: folder)
        let destination = LocalFolderDestination(folder: folder)
        let latest = try await destination.resolve("latest").name
        XCTAssertEqual(latest, next)
        let refused = try runStoreBackup(["delete", full, "--to", folder])
        XCTAssertNotEqual(refused.status, 0, "a base others need")
        let kept = RetentionPolicy(keepLast: 1).apply(to: try await destination.listBackups())
        XCTAssertEqual(kept.filter(\.keep).map(\.backup.name), [next])
        let pruner = BackupPruner(destination: destination, stateDirectory: work + "/state")
        let plan = try await pruner.plan(RetentionPolicy(keepLast: 1), host: nil, storesDirectory: nil)
        let deleted = try await pruner.execute(plan)
        XCTAssertEqual(deleted, [], "the kept backup's chain stays whole")
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: folder)), [full, back, next])
    }

    // MARK: list

    func testListShowsKindBaseAndBrokenChains() throws {
        let folder = work + "/backups"
        try place(all, in: folder)
        let listed = try runStoreBackup(["list", "--to", folder, "--json"], environment: ["HOME": work])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(rows.map { $0["name"] as? String }, all.reversed(), "newest first")
        let byName = Dictionary(uniqueKeysWithValues: rows.map { ($0["name"] as! String, $0) })
        XCTAssertEqual(byName[f1]?["kind"] as? String, "full")
        XCTAssertTrue(byName[f1]?["base"] is NSNull, "a full has no base")
        XCTAssertEqual(byName[i3]?["kind"] as? String, "incremental")
        XCTAssertEqual(byName[i3]?["base"] as? String, i2)
        XCTAssertEqual(byName[i3]?["chainBroken"] as? Bool, false)
        XCTAssertNil(byName[i3]?["missingBase"])
        XCTAssertEqual(byName[i9]?["kind"] as? String, "incremental")
        XCTAssertTrue(byName[i9]?["base"] is NSNull)
        XCTAssertEqual(byName[i9]?["chainBroken"] as? Bool, true)
        XCTAssertEqual(byName[i9]?["missingBase"] as? String, "2026-11-08 020000")

        let plain = try runStoreBackup(["list", "--to", folder], environment: ["HOME": work])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        let lines = plain.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, all.count)
        let line = { (name: String) in lines.first { $0.contains(name) } ?? "" }
        XCTAssertTrue(line(i9).contains("incremental  \(i9)  (base missing: no backup of 2026-11-08 020000 here"), line(i9))
        XCTAssertTrue(line(i3).hasSuffix("incremental  \(i3)"), line(i3))
        XCTAssertTrue(line(f7).hasSuffix("full         \(f7)"), line(f7))
    }

    // MARK: delete

    func testDeletingABaseIsRefusedUnlessWithDependents() throws {
        let folder = work + "/backups"
        try place(all, in: folder)
        let refused = try runStoreBackup(["delete", i2, "--to", folder, "--yes"], environment: ["HOME": work])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("is the base of 1 incremental backup (\"\(i3)\")"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--with-dependents"), refused.stderr)
        XCTAssertEqual(refused.stderr.split(separator: "\n").count, 1, "one line: \(refused.stderr)")
        XCTAssertEqual(try names(in: folder), Set(all), "nothing was deleted")

        let base = try runStoreBackup(["delete", f1, "--to", folder, "--yes"], environment: ["HOME": work])
        XCTAssertNotEqual(base.status, 0)
        XCTAssertTrue(base.stderr.contains("is the base of 3 incremental backups (\"\(i4)\", \"\(i3)\", \"\(i2)\")"), base.stderr)

        // A backup nothing depends on goes as before, incremental or full.
        let leaf = try runStoreBackup(["delete", i6, "--to", folder, "--yes"], environment: ["HOME": work])
        XCTAssertEqual(leaf.status, 0, leaf.stderr)
        XCTAssertEqual(try names(in: folder), Set(all).subtracting([i6]))

        let cascade = try runStoreBackup(["delete", f1, "--with-dependents", "--to", folder, "--yes"], environment: ["HOME": work])
        XCTAssertEqual(cascade.status, 0, cascade.stderr)
        let said = cascade.stderr.split(separator: "\n").filter { $0.contains("deleted") }.map { String($0) }
        XCTAssertEqual(said.map { line in [i4, i3, i2, f1].firstIndex { line.contains($0) } }, [0, 1, 2, 3], "newest first: \(said)")
        XCTAssertEqual(try names(in: folder), [f5, f7, i9])
    }

    /// The library deletes newest first and stops at the first failure: a dependent that
    /// cannot be deleted leaves its base (and everything below) in place.
    func testLibraryDeleteStopsBeforeABaseWhoseDependentStays() async throws {
        let folder = work + "/backups"
        try place(all, in: folder)
        try place([], in: work + "/Stores")
        let helper = StoreHelper(storesDirectory: work + "/Stores", destination: LocalFolderDestination(folder: folder))
        do {
            try await helper.repository.delete(f5)
            XCTFail("a base was deleted")
        } catch StoreBackupError.backupHasDependents(let name, _, let dependents) {
            XCTAssertEqual(name, f5)
            XCTAssertEqual(dependents, [i6])
        }
        let locked = RefusingDeletes(base: LocalFolderDestination(folder: folder), refused: [i3])
        do {
            _ = try await BackupRepository(destination: locked).delete(f1, withDependents: true)
            XCTFail("the refused dependent did not stop the delete")
        } catch StoreBackupError.backupLocked(let name, _, _) {
            XCTAssertEqual(name, i3)
        }
        XCTAssertEqual(try names(in: folder), Set(all).subtracting([i4]), "only the newest dependent went; i3's chain stays whole")
        let deleted = try await helper.repository.delete(f5, withDependents: true)
        XCTAssertEqual(deleted, [i6, f5])
    }

    // MARK: copy

    func testCopyBringsTheChainBaseFirstAndNeverAnIncrementalWithoutItsBase() async throws {
        let source = work + "/source", target = work + "/target"
        try place(all, in: source)
        try place([], in: target)
        let recorder = RecordingUploads(base: LocalFolderDestination(folder: target))
        let copier = BackupCopier(from: LocalFolderDestination(folder: source), to: recorder)

        let outcomes = try await copier.copyChain(i3)
        XCTAssertEqual(outcomes.map(\.name), [f1, i2, i3])
        XCTAssertEqual(outcomes.map(\.status), [.copied, .copied, .copied])
        XCTAssertEqual(recorder.uploads, [f1, i2, i3], "base first")
        XCTAssertEqual(try names(in: target), [f1, i2, i3])

        // The base already there: only the incremental goes.
        let single = try await copier.copy(i4)
        XCTAssertEqual(single.status, .copied)
        XCTAssertEqual(recorder.uploads.last, i4)
        let again = try await copier.copyChain(i4)
        XCTAssertEqual(again.map(\.status), [.alreadyThere])

        // A base at neither end: the incremental is refused.
        let broken = try await copier.copyChain(i9)
        XCTAssertEqual(broken.map(\.status), [.failed])
        XCTAssertTrue(broken[0].error?.contains("is at neither") ?? false, broken[0].error ?? "")
        XCTAssertFalse(try names(in: target).contains(i9))

        // A base that cannot be copied (another backup holds its name there): its
        // incremental is not copied either.
        try FileManager.default.removeItem(atPath: target + "/" + f1)
        try FileManager.default.removeItem(atPath: target + "/" + i2)
        try FileManager.default.removeItem(atPath: target + "/" + i3)
        try place([f1], in: target, size: 7)
        let blocked = try await copier.copyChain(i3)
        XCTAssertEqual(blocked.map(\.name), [f1, i2, i3])
        XCTAssertEqual(blocked.map(\.status), [.failed, .failed, .failed])
        XCTAssertTrue(blocked[0].error?.contains("refusing to overwrite") ?? false, blocked[0].error ?? "")
        XCTAssertTrue(blocked[1].error?.contains("its base \"\(f1)\" could not be copied") ?? false, blocked[1].error ?? "")
        XCTAssertEqual(try names(in: target), [f1, i4], "nothing of the chain above the blocked base arrived")
    }

    func testCopyAllGoesInChainOrder() async throws {
        let source = work + "/source", target = work + "/target"
        try place(all, in: source)
        try place([], in: target)
        let recorder = RecordingUploads(base: LocalFolderDestination(folder: target))
        let outcomes = try await BackupCopier(from: LocalFolderDestination(folder: source), to: recorder).copyAll()
        XCTAssertEqual(outcomes.filter { $0.status == .failed }.map(\.name), [i9])
        XCTAssertEqual(recorder.uploads, [f1, i2, i3, i4, f5, i6, f7])
        let chains = BackupChains(names: Array(try names(in: target)))
        XCTAssertTrue(chains.backups.allSatisfy { !chains.isBroken($0.name) }, "no incremental without its base at the target")

        let cli = try runStoreBackup(["copy", i6, "--from", source, "--to", work + "/third"], environment: ["HOME": work])
        XCTAssertEqual(cli.status, 0, cli.stderr)
        let lines = cli.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 2, cli.stdout)
        XCTAssertTrue(lines.first?.hasPrefix("copied \(f5)") ?? false, cli.stdout)
        XCTAssertTrue(lines.last?.hasPrefix("copied \(i6)") ?? false, cli.stdout)
    }
}

/// A real destination whose deletes of some names are refused, as S3 Object Lock refuses them.
struct RefusingDeletes: WrappingDestination {
    let base: any BackupDestination
    let refused: Set<String>

    func delete(_ name: String) async throws {
        if refused.contains(name) { throw StoreBackupError.backupLocked(name: name, destination: displayName, until: nil) }
        try await base.delete(name)
    }
}

/// A real destination that remembers the order of its uploads.
final class RecordingUploads: WrappingDestination, @unchecked Sendable {
    let base: any BackupDestination
    private let lock = NSLock()
    private var recorded: [String] = []
    var uploads: [String] { lock.withLock { recorded } }

    init(base: any BackupDestination) { self.base = base }

    func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try await base.upload(file: file, as: name, progress: progress)
        lock.withLock { recorded.append(name) }
    }
}
