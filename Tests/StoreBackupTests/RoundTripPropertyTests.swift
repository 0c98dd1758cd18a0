import Foundation
import XCTest

@testable import StoreBackup

/// Issue 32's property: every store that `create` accepts, `restore` gives back exactly.
///
/// Seeded random stores (Tests/Support/roundtrip_stores.py generate): names from every class
/// (not UTF-8, control characters, backslashes, `%`, NFC and NFD spellings side by side, long
/// parts), depths, empty files and folders, hard links, FIFOs, sockets, links inside, dangling
/// and outside, modes with set-user-ID, set-group-ID and sticky, times before 1970 and after
/// 2038, databases in WAL and rollback mode. Each goes through the built command line:
/// create, verify latest, restore latest; the oracle is an independent walk of both trees
/// (lstat on raw names, modes, times, contents, link targets, databases by their rows).
/// A store with links leaving it must make create warn about each, and verify and restore
/// refuse it without `--allow-outside-links` and give it back exactly with it.
///
/// STOREBACKUP_ROUNDTRIP_CASES sets how many stores (default 24, at least 1);
/// STOREBACKUP_ROUNDTRIP_SEED the first seed (default 1), to replay a failure.
final class RoundTripPropertyTests: XCTestCase {
    /// The default run's size: seeds 1-24 make 6 stores with outside links. A run this long must
    /// meet some (a shorter replay of a few seeds may not).
    static let defaultCases = 24

    func testEveryStoreCreateAcceptsComesBackExactly() throws {
        let environmentValues = ProcessInfo.processInfo.environment
        let cases = try TestEnvironment.count("STOREBACKUP_ROUNDTRIP_CASES", default: Self.defaultCases, floor: 1)
        let firstSeed = environmentValues["STOREBACKUP_ROUNDTRIP_SEED"].flatMap(Int.init) ?? 1
        let work = try TestEnvironment.temporaryDirectory("roundtrip-property")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let environment = ["HOME": work, "TMPDIR": work + "/tmp"]
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        var withOutsideLinks = 0

        for seed in firstSeed..<(firstSeed + cases) {
            let store = work + "/\(seed)/Stores", backups = work + "/\(seed)/backups", restored = work + "/\(seed)/Restored"
            try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
            let generated = try runTool("/usr/bin/env", ["python3", RoundTripTests.script, "generate", store, "\(seed)"])
            XCTAssertEqual(generated.status, 0, "seed \(seed): \(generated.stderr)")
            let made = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(generated.stdout.utf8)) as? [String: Any])
            // Required keys: a renamed one must not read as "none made".
            let outsideLinks = try XCTUnwrap(made["outsideLinks"] as? [String], "seed \(seed)").map {
                EscapedName.escape(Self.bytes(hex: $0))
            }
            let sockets = try XCTUnwrap(made["sockets"] as? [String], "seed \(seed)").map { EscapedName.escape(Self.bytes(hex: $0)) }
            let before = try RoundTripTests.describe(store)

            let created = try runStoreBackup(["create", store, "--to", backups], environment: environment)
            XCTAssertEqual(created.status, 0, "seed \(seed): create: \(created.stderr)")
            for link in outsideLinks {
                XCTAssertTrue(
                    created.stderr.contains("warning: the link \(link) -> "), "seed \(seed): no warning for \(link): \(created.stderr)")
            }
            for socket in sockets {
                XCTAssertTrue(
                    created.stderr.contains("warning: \(socket) (a socket) is not in the backup"), "seed \(seed): \(created.stderr)")
            }
            if outsideLinks.isEmpty && sockets.isEmpty {
                XCTAssertFalse(created.stderr.contains("warning"), "seed \(seed): \(created.stderr)")
            }

            var options: [String] = []
            if !outsideLinks.isEmpty {
                withOutsideLinks += 1
                let refused = try runStoreBackup(["restore", "latest", restored, "--from", backups, "--yes"], environment: environment)
                XCTAssertNotEqual(refused.status, 0, "seed \(seed): restore without the option")
                XCTAssertTrue(refused.stderr.contains("--allow-outside-links"), "seed \(seed): \(refused.stderr)")
                XCTAssertFalse(FileSystem.fileExists(restored), "seed \(seed): a refused restore leaves nothing")
                options = ["--allow-outside-links"]
            }
            let verified = try runStoreBackup(["verify", "latest", "--from", backups] + options, environment: environment)
            XCTAssertEqual(verified.status, 0, "seed \(seed): verify: \(verified.stdout) \(verified.stderr)")
            let restore = try runStoreBackup(
                ["restore", "latest", restored, "--from", backups, "--yes"] + options, environment: environment)
            XCTAssertEqual(restore.status, 0, "seed \(seed): restore: \(restore.stderr)")
            let after = try RoundTripTests.describe(restored)
            XCTAssertEqual(after, before, "seed \(seed): \(RoundTripTests.difference(before, after))")
            try? FileManager.default.removeItem(atPath: work + "/\(seed)")
        }
        print("round trip: \(cases) generated stores from seed \(firstSeed), \(withOutsideLinks) with links leaving the store")
        // Else the refusal without --allow-outside-links, and the restore with it, went untested.
        if cases >= Self.defaultCases {
            XCTAssertGreaterThan(withOutsideLinks, 0, "\(cases) generated stores from seed \(firstSeed), none with a link leaving it")
        }
    }

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count - 1, by: 2).compactMap {
            UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)
        }
    }
}
