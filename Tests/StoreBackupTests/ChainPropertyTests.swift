import Foundation
import XCTest

@_spi(Testing) @testable import StoreBackup

/// Issue 47's property: random chains (seeded) with the store changing between backups, a
/// file rewritten during create (same and other bytes), chain members removed at random, the
/// clock stepped back and forth, bursts of creates, and the chain state damaged. After each
/// create, the backup create called good verifies and restores to the tree of its moment; at
/// the end of each case every backup whose chain is still whole (by this test's own record
/// of what it removed) does too, and `list`'s reading of the chains agrees with that record.
/// The oracle is the independent walk of roundtrip_stores.py (databases by rows, files by
/// bytes, modes and times).
///
/// `STOREBACKUP_CHAIN_PROPERTY_CASES` (default 4, at least 1) and `STOREBACKUP_CHAIN_PROPERTY_SEED` (default 47)
/// make a longer or another run; the seed is printed.
final class ChainPropertyTests: XCTestCase {
    var work = ""

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// The `.settings` file's path in the walk (hex of its bytes): a rewriter may change it
    /// during create, so its content is checked against what the rewriter wrote instead.
    static let settingsKey = Array(".settings".utf8).map { String(format: "%02x", $0) }.joined()
    static let settingsVariants = [
        Data(String(repeating: "theme=dark\n", count: 91).utf8.prefix(1_000)),
        Data(String(repeating: "theme=lite\n", count: 91).utf8.prefix(1_000)),
        Data(String(repeating: "theme=high-contrast\n", count: 20).utf8),
    ]

    func testRandomChainsRestoreEveryBackupCreateCalledGood() async throws {
        let cases = try TestEnvironment.count("STOREBACKUP_CHAIN_PROPERTY_CASES", default: 4, floor: 1)
        let seed = UInt64(ProcessInfo.processInfo.environment["STOREBACKUP_CHAIN_PROPERTY_SEED"] ?? "") ?? 47
        print("ChainPropertyTests: seed \(seed), \(cases) cases")
        work = try TestEnvironment.temporaryDirectory("chain-property")
        var random = SplitMix64(seed: seed)
        var creates = 0
        for index in 0..<cases {
            creates += try await runCase(index, random: &random)
        }
        XCTAssertGreaterThanOrEqual(creates, cases * 4, "each case makes backups")
    }

    /// One case: a new store and destination, 16 random steps. Returns the creates made.
    private func runCase(_ index: Int, random: inout SplitMix64) async throws -> Int {
        let root = work + "/case-\(index)"
        let store = root + "/Stores"
        let backups = root + "/backups"
        try StoreFixture.make(at: store, logRows: 200, blobCount: 2)
        try Self.settingsVariants[0].write(to: URL(fileURLWithPath: store + "/.settings"))
        let clock = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        var helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        helper.now = { clock.withLock { $0 } }
        let made = ChainedHelper(helper, policy: IncrementalPolicy(maxChainLength: 5))

        var trees: [String: [String: [String: AnyHashable]]] = [:]
        var settingsAllowed: [String: Set<Data>] = [:]
        var bases: [String: String] = [:]
        var removed: Set<String> = []
        var creates = 0

        func create(rewriting: Bool) async throws {
            let stop = Locked(false)
            var rewriter: Thread?
            if rewriting {
                let variants = Self.settingsVariants
                let path = store + "/.settings"
                let thread = Thread {
                    var turn = 0
                    while !stop.withLock({ $0 }) {
                        ChainProofTests.rewrite(path, with: variants[turn % 2 == 0 ? 0 : 2])
                        turn += 1
                    }
                    ChainProofTests.rewrite(path, with: variants[0])
                }
                thread.start()
                rewriter = thread
            }
            let before = try Data(contentsOf: URL(fileURLWithPath: store + "/.settings"))
            let backup = try await made.createBackup()
            stop.withLock { $0 = true }
            while let thread = rewriter, !thread.isFinished { usleep(1_000) }
            creates += 1
            let verified = try await made.repository.verify(.named(backup.name))[0]
            XCTAssertTrue(verified.ok, "case \(index): \(backup.name): \(verified.problem ?? "")")
            let tree = try Self.describe(store)
            trees[backup.name] = tree
            settingsAllowed[backup.name] =
                rewriting ? [Data(), Self.settingsVariants[0], Self.settingsVariants[2]] : [before]
            if let base = backup.base { bases[backup.name] = base }
            try await assertRestores(
                backup.name, from: backups, tree: tree, settings: settingsAllowed[backup.name]!, label: "case \(index)")
        }

        for _ in 0..<16 {
            switch random.next() % 10 {
            case 0, 1:
                try Self.changeStore(store, random: &random)
                clock.withLock { $0 = $0.addingTimeInterval(Double(1 + random.next() % 600)) }
            case 2, 3:
                try await create(rewriting: false)
                clock.withLock { $0 = $0.addingTimeInterval(Double(random.next() % 120)) }
            case 4:
                try await create(rewriting: true)
            case 5:
                // Another process's clock, or this one corrected: back or forth by up to three hours.
                let step = Double(random.next() % 21_600) - 10_800
                clock.withLock { $0 = $0.addingTimeInterval(step) }
            case 6:
                for _ in 0..<3 { try await create(rewriting: false) }
            case 7:
                // A member of the chain lost at the destination (a lifecycle rule, a partial sync).
                let present = ((try? FileManager.default.contentsOfDirectory(atPath: backups)) ?? []).filter(BackupName.isBackup).sorted()
                if !present.isEmpty {
                    let victim = present[Int(random.next() % UInt64(present.count))]
                    try FileManager.default.removeItem(atPath: backups + "/" + victim)
                    removed.insert(victim)
                }
            case 8:
                try Self.damageChainState(of: store, random: &random)
            default:
                try Self.changeStore(store, random: &random)
                try await create(rewriting: random.next() % 2 == 0)
            }
        }

        // Every backup whose chain this test left whole restores to its tree; the listing
        // reads the same chains.
        let chains = BackupChains(try await LocalFolderDestination(folder: backups).listBackups())
        for (name, tree) in trees.sorted(by: { $0.key < $1.key }) where !removed.contains(name) {
            var chain: [String] = []
            var next: String? = name
            while let link = next {
                chain.append(link)
                next = bases[link]
            }
            let whole = chain.allSatisfy { !removed.contains($0) }
            // `list` reads chains from names: a removed base whose date a later backup took
            // (the clock set back by hours names backups by the clock) reads as present, and
            // only the manifests (which restore and verify follow) tell them apart.
            let reused = chain.contains { link in
                removed.contains(link)
                    && trees.keys.contains { $0 != link && BackupName.ownDateText(of: $0) == BackupName.ownDateText(of: link) }
            }
            if !reused { XCTAssertEqual(chains.isBroken(name), !whole, "case \(index): list's reading of \(name)") }
            guard whole else { continue }
            XCTAssertEqual(chains.chain(of: name), chain.reversed(), "case \(index): list's chain of \(name)")
            let result = try await made.repository.verify(.named(name))[0]
            XCTAssertTrue(result.ok, "case \(index): \(name) at the end: \(result.problem ?? "")")
            try await assertRestores(name, from: backups, tree: tree, settings: settingsAllowed[name]!, label: "case \(index) at the end")
        }
        return creates
    }

    private func assertRestores(
        _ name: String, from backups: String, tree: [String: [String: AnyHashable]], settings: Set<Data>, label: String
    ) async throws {
        let target = work + "/restored-\(UUID().uuidString.prefix(8))/Stores"
        defer { try? FileManager.default.removeItem(atPath: FileSystem.parentDirectory(of: target)) }
        _ = try await StoreHelper(storesDirectory: target, destination: LocalFolderDestination(folder: backups)).restore(name)
        let restored = try Self.describe(target)
        XCTAssertEqual(restored, tree, "\(label): \(name): \(RoundTripTests.difference(tree, restored))")
        let content = try Data(contentsOf: URL(fileURLWithPath: target + "/.settings"))
        XCTAssertTrue(settings.contains(content), "\(label): \(name): .settings holds \(content.count) bytes no writer wrote")
    }

    /// The walk without `.settings` (see ``settingsKey``) and without the root folder's time:
    /// create opens the databases, whose `-wal`/`-shm` files it makes in the root, so the
    /// root's time after a create is the create's own, not the store's at its moment.
    private static func describe(_ root: String) throws -> [String: [String: AnyHashable]] {
        var tree = try RoundTripTests.describe(root)
        tree[settingsKey] = nil
        tree[""]?["mtime"] = nil
        return tree
    }

    /// Rows inserted and updated, a blob added, changed or removed.
    private static func changeStore(_ store: String, random: inout SplitMix64) throws {
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        let rows = 1 + random.next() % 20
        try app.execute(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < \(rows)) INSERT INTO log(note) SELECT 'step ' || x FROM n",
            operation: "test")
        try app.execute(
            "UPDATE accounts SET balance = balance + 1 WHERE id % \(2 + random.next() % 7) = 0", operation: "test")
        app.close()
        let blobs = store + "/.App_SUPPORT/_EXTERNAL_DATA"
        let present = try FileManager.default.contentsOfDirectory(atPath: blobs).sorted()
        switch random.next() % 3 {
        case 0:
            let bytes = (0..<(1 + random.next() % 40_000)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            FileManager.default.createFile(atPath: blobs + "/blob-\(random.next() % 1_000_000)", contents: Data(bytes))
        case 1 where !present.isEmpty:
            let victim = blobs + "/" + present[Int(random.next() % UInt64(present.count))]
            ChainProofTests.rewrite(victim, with: Data("changed \(random.next())".utf8))
        case 2 where present.count > 1:
            try FileManager.default.removeItem(atPath: blobs + "/" + present[Int(random.next() % UInt64(present.count))])
        default:
            break
        }
    }

    /// One byte of one file of the chain state changed (when there is a state).
    private static func damageChainState(of store: String, random: inout SplitMix64) throws {
        let root = FileSystem.parentDirectory(of: store) + "/.Stores.storebackup-chains"
        guard let key = try? FileManager.default.contentsOfDirectory(atPath: root).first else { return }
        let folder = root + "/" + key
        let files = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
        guard !files.isEmpty else { return }
        let path = folder + "/" + files[Int(random.next() % UInt64(files.count))]
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        guard !bytes.isEmpty else { return }
        bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(1 << (random.next() % 8))
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }
}
