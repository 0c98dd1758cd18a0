import Foundation
import XCTest

@testable import StoreBackup

/// Issue 35's property: after every night of a chain, restoring the newest backup, and at the
/// end every earlier one, gives back exactly the store as it was when that backup was made.
///
/// Seeded nights of work (Tests/Support/incremental_nights.py): rows updated, inserted and
/// deleted, VACUUM, page-size changes, databases added and removed, blobs added, rewritten
/// and removed (one rewritten with its old size and time), folders and links changed, modes
/// changed. Every other chain is encrypted. Each night goes through the built command line (`create --incremental`, `verify`,
/// `restore`); the oracle is the independent tree walk of Tests/Support/roundtrip_stores.py
/// (raw names, modes, times, contents, link targets, databases by their rows).
///
/// STOREBACKUP_INCREMENTAL_SEEDS sets how many chains (default 2), STOREBACKUP_INCREMENTAL_NIGHTS
/// how many nights each (default 6), STOREBACKUP_INCREMENTAL_SEED the first seed (default 1).
final class IncrementalRoundTripTests: XCTestCase {
    static let nights = TestEnvironment.packageRoot + "/Tests/Support/incremental_nights.py"

    func testEveryBackupOfAChainRestoresTheStoreAsItWas() throws {
        let values = ProcessInfo.processInfo.environment
        let seeds = values["STOREBACKUP_INCREMENTAL_SEEDS"].flatMap(Int.init) ?? 2
        let nights = values["STOREBACKUP_INCREMENTAL_NIGHTS"].flatMap(Int.init) ?? 6
        let firstSeed = values["STOREBACKUP_INCREMENTAL_SEED"].flatMap(Int.init) ?? 1
        let work = try TestEnvironment.temporaryDirectory("incremental-roundtrip")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let environment = ["HOME": work, "TMPDIR": work + "/tmp"]
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        var incrementals = 0

        for seed in firstSeed..<(firstSeed + seeds) {
            let store = work + "/\(seed)/Stores", backups = work + "/\(seed)/backups"
            try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
            let made = try runTool("/usr/bin/env", ["python3", Self.nights, "make", store, "\(seed)"])
            XCTAssertEqual(made.status, 0, "seed \(seed): \(made.stderr)")
            var expected: [String: [String: [String: AnyHashable]]] = [:]
            // Every other chain is encrypted (keyed page hashes, every entry AES-256).
            var password: [String] = []
            if seed % 2 == 0 {
                let file = work + "/\(seed)/password"
                FileManager.default.createFile(
                    atPath: file, contents: Data("chain password \(seed)\n".utf8), attributes: [.posixPermissions: 0o600])
                password = ["--password-file", file]
            }

            for night in 0...nights {
                if night > 0 {
                    let worked = try runTool("/usr/bin/env", ["python3", Self.nights, "night", store, "\(seed)", "\(night)"])
                    XCTAssertEqual(worked.status, 0, "seed \(seed) night \(night): \(worked.stderr)")
                }
                // Described before create: create's own connection to a WAL database makes and
                // removes its -wal and -shm files, which moves the folder's time after the scan.
                let tree = try RoundTripTests.describe(store)
                let before = Set(try FileManager.default.contentsOfDirectory(atPath: backups))
                // Every night an incremental when the chain allows one: the test is about long chains.
                let created = try runStoreBackup(
                    ["create", store, "--to", backups, "--incremental", "--max-delta-share", "1"] + (password.isEmpty ? [] : ["--encrypt"])
                        + password, environment: environment)
                XCTAssertEqual(created.status, 0, "seed \(seed) night \(night): create: \(created.stderr)")
                let new = Set(try FileManager.default.contentsOfDirectory(atPath: backups)).subtracting(before)
                guard new.count == 1, let name = new.first else {
                    return XCTFail("seed \(seed) night \(night): create published \(new.sorted())")
                }
                if night == 0 {
                    XCTAssertFalse(BackupName.isIncremental(name), "the first backup of a chain is a full: \(name)")
                } else if BackupName.isIncremental(name) {
                    incrementals += 1
                }
                expected[name] = tree

                let verified = try runStoreBackup(["verify", name, "--from", backups] + password, environment: environment)
                XCTAssertEqual(verified.status, 0, "seed \(seed) night \(night): verify \(name): \(verified.stderr)")
                let metadata = try runStoreBackup(
                    ["verify", name, "--from", backups, "--metadata-only"] + password, environment: environment)
                XCTAssertEqual(metadata.status, 0, "seed \(seed) night \(night): verify --metadata-only \(name): \(metadata.stdout)")
                try assertRestores(name, from: backups, equals: expected[name]!, work: work, options: password, environment: environment)
            }
            // Every earlier backup still restores its own night (later nights must not disturb them).
            for (name, tree) in expected.sorted(by: { $0.key < $1.key }).dropLast() {
                try assertRestores(name, from: backups, equals: tree, work: work, options: password, environment: environment)
            }
            try? FileManager.default.removeItem(atPath: work + "/\(seed)")
        }
        XCTAssertGreaterThan(incrementals, 0, "no night made an incremental backup")
        print("incremental round trip: \(seeds) chains of \(nights) nights from seed \(firstSeed), \(incrementals) incrementals")
    }

    private func assertRestores(
        _ name: String, from backups: String, equals expected: [String: [String: AnyHashable]], work: String,
        options: [String], environment: [String: String], line: UInt = #line
    ) throws {
        let restored = work + "/restored/Stores"
        try? FileManager.default.removeItem(atPath: work + "/restored")
        try FileManager.default.createDirectory(atPath: work + "/restored", withIntermediateDirectories: true)
        let restore = try runStoreBackup(["restore", name, restored, "--from", backups, "--yes"] + options, environment: environment)
        XCTAssertEqual(restore.status, 0, "restore \(name): \(restore.stderr)", line: line)
        let after = try RoundTripTests.describe(restored)
        XCTAssertTrue(after == expected, "\(name) restored differently: \(RoundTripTests.difference(expected, after))", line: line)
    }
}
