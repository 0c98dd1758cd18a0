import Foundation
import XCTest

@testable import StoreBackup

/// A bounded, seeded mutation fuzzer over real backups (plain and encrypted).
///
/// Each case flips bits, overwrites, inserts, deletes or truncates bytes, rewrites a
/// header's size or length fields, or changes bytes of an entry's name (in both headers,
/// so libzip's consistency check does not stop it first), then restores and verifies the
/// result. Whatever happens, the live store is either untouched (a refused restore) or
/// holds exactly the backed-up content (a mutation of something unchecked, like a
/// timestamp), nothing is written outside the restore folder, no `_New` is left, and
/// restore and verify agree. `STOREBACKUP_FUZZ_CASES` (default 2,000) and
/// `STOREBACKUP_FUZZ_SEED` make longer or different runs.
final class MutationFuzzTests: XCTestCase {
    var work = ""
    static let environment = ProcessInfo.processInfo.environment
    static let caseCount = Int(environment["STOREBACKUP_FUZZ_CASES"] ?? "") ?? 2_000
    static let seed = UInt64(environment["STOREBACKUP_FUZZ_SEED"] ?? "") ?? 0x5EED_0012
    static let backupName = "2000-01-01 000000 Stores.zip"

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("fuzz")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testMutatedBackupsNeverEscapeCrashOrTouchTheStore() async throws {
        let sources = try await makeSourceBackups()
        let target = work + "/Target"
        let mutatedFolder = work + "/mutated"
        let password = try BackupPassword("fuzz password")
        let helper = StoreHelper(
            storesDirectory: target, destination: LocalFolderDestination(folder: mutatedFolder),
            passwords: .fixed(password))
        let verifier = BackupVerifier(destination: LocalFolderDestination(folder: mutatedFolder), passwords: .fixed(password))
        let archive = mutatedFolder + "/" + Self.backupName
        try FileManager.default.createDirectory(atPath: mutatedFolder, withIntermediateDirectories: true)

        // The reference: what a good restore leaves (content only: times and modes are not
        // covered by checksums, so a mutation there may legitimately get through).
        try Data(sources[0]).write(to: URL(fileURLWithPath: archive))
        _ = try await helper.restore(Self.backupName)
        let reference = try content(of: target)

        var random = SplitMix64(seed: Self.seed)
        var outcomes: [String: Int] = [:]
        for number in 0..<Self.caseCount {
            let source = sources[number % sources.count]
            let (bytes, kind) = Mutator.mutate(source, using: &random)
            try Data(bytes).write(to: URL(fileURLWithPath: archive))
            let before = try StoreFixture.describe(target)
            let outside = try listing(of: work)
            let label = "case \(number) (\(kind), seed \(Self.seed))"

            var restored = false
            do {
                // Nothing kept beside the store: what lands outside the restore folder is an escape.
                _ = try await helper.restore(Self.backupName, options: RestoreOptions(keepReplaced: 0))
                restored = true
            } catch let error as StoreBackupError {
                XCTAssertFalse(error.description.isEmpty)
            } catch {
                XCTFail("\(label): restore threw a non-StoreBackupError \(error)")
            }
            if restored {
                XCTAssertEqual(try content(of: target), reference, "\(label): restored content differs from the backup")
            } else {
                XCTAssertEqual(try StoreFixture.describe(target), before, "\(label): the live store changed")
            }
            XCTAssertEqual(try listing(of: work), outside, "\(label): something was written outside the restore folder")
            let layout = StoreLayout(storesDirectory: target)
            XCTAssertFalse(FileSystem.fileExists(layout.new), "\(label): _New left behind")
            XCTAssertFalse(FileSystem.fileExists(layout.journal), "\(label): journal left behind")

            let verdict = try await verifier.verify(.named(Self.backupName))
            XCTAssertEqual(verdict.first?.ok, restored, "\(label): verify (\(verdict.first?.problem ?? "ok")) and restore disagree")
            outcomes[restored ? "restored" : "refused", default: 0] += 1
            if testRun?.failureCount ?? 0 > 20 { break }
        }
        print("mutation fuzzer: \(Self.caseCount) cases, seed \(Self.seed): \(outcomes)")
        XCTAssertGreaterThan(outcomes["refused"] ?? 0, Self.caseCount / 2, "most mutations must be caught")
    }

    /// A sample of the same mutations through the command line: one error line and a
    /// bounded peak RSS for each refusal.
    func testMutatedBackupsThroughTheCommandLine() async throws {
        let sources = try await makeSourceBackups()
        let target = work + "/Target"
        try StoreFixture.make(at: target, logRows: 10, blobCount: 1)
        let mutatedFolder = work + "/mutated"
        try FileManager.default.createDirectory(atPath: mutatedFolder, withIntermediateDirectories: true)
        let passwordFile = work + "/password"
        try "fuzz password\n".write(toFile: passwordFile, atomically: false, encoding: .utf8)
        chmod(passwordFile, 0o600)
        var random = SplitMix64(seed: Self.seed ^ 0xC11)
        for number in 0..<40 {
            let (bytes, kind) = Mutator.mutate(sources[number % sources.count], using: &random)
            try Data(bytes).write(to: URL(fileURLWithPath: mutatedFolder + "/" + Self.backupName))
            let before = try StoreFixture.describe(target)
            let (result, peak) = try runStoreBackupMeasuringPeakRSS(
                ["restore", Self.backupName, target, "--from", mutatedFolder, "--yes", "--password-file", passwordFile])
            XCTAssertLessThan(peak, 64 * 1024, "case \(number) (\(kind)): peak RSS \(peak) KiB")
            if result.status != 0 {
                XCTAssertEqual(
                    result.stderr.split(separator: "\n").filter { $0.hasPrefix("storebackup: error:") }.count, 1,
                    "case \(number) (\(kind)): \(result.stderr)")
                XCTAssertEqual(try StoreFixture.describe(target), before, "case \(number) (\(kind)): the live store changed")
            }
        }
    }

    /// A plain and an encrypted backup of the same small store, as bytes.
    private func makeSourceBackups() async throws -> [[UInt8]] {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 60, blobCount: 2)
        var archives: [[UInt8]] = []
        for encrypt in [false, true] {
            let folder = work + (encrypt ? "/encrypted" : "/plain")
            let helper = StoreHelper(
                storesDirectory: store, destination: LocalFolderDestination(folder: folder),
                passwords: .fixed(try BackupPassword("fuzz password")))
            let backup = try await helper.createBackup(CreateOptions(encrypt: encrypt))
            archives.append(Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + backup.name))))
        }
        return archives
    }

    /// Type and content digest of every path (what checksums protect).
    private func content(of root: String) throws -> [String: String] {
        try StoreFixture.describe(root, includeJournals: false).mapValues { "\($0.type) \($0.digest)" }
    }

    private func listing(of root: String) throws -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        var paths: [String] = []
        for case let relative as String in enumerator where !relative.hasPrefix("Target/") {
            paths.append(relative)
        }
        return paths.filter { $0 != ".Target.storebackup-lock" }.sorted()
    }
}

/// The mutations: bytes, lengths and names.
enum Mutator {
    static func mutate(_ source: [UInt8], using random: inout SplitMix64) -> ([UInt8], String) {
        var bytes = source
        let rounds = Int.random(in: 1...2, using: &random)
        var kinds: [String] = []
        for _ in 0..<rounds {
            guard !bytes.isEmpty else { break }
            switch Int.random(in: 0..<8, using: &random) {
            case 0:
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
                }
                kinds.append("bit flips")
            case 1:
                let start = Int.random(in: 0..<bytes.count, using: &random)
                let end = min(bytes.count, start + Int.random(in: 1...64, using: &random))
                for index in start..<end { bytes[index] = UInt8.random(in: 0...255, using: &random) }
                kinds.append("overwrite")
            case 2:
                bytes.removeLast(Int.random(in: 1...bytes.count, using: &random))
                kinds.append("truncate")
            case 3:
                let at = Int.random(in: 0...bytes.count, using: &random)
                bytes.insert(
                    contentsOf: (0..<Int.random(in: 1...16, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }, at: at)
                kinds.append("insert")
            case 4:
                let start = Int.random(in: 0..<bytes.count, using: &random)
                bytes.removeSubrange(start..<min(bytes.count, start + Int.random(in: 1...64, using: &random)))
                kinds.append("delete")
            case 5, 6:
                if mutateLengthField(&bytes, using: &random) { kinds.append("length field") }
            default:
                if mutateName(&bytes, using: &random) { kinds.append("name") }
            }
        }
        return (bytes, kinds.joined(separator: "+"))
    }

    /// Positions of a 4-byte little-endian signature.
    static func positions(of signature: UInt32, in bytes: [UInt8]) -> [Int] {
        guard bytes.count >= 4 else { return [] }
        let b = [UInt8(signature & 0xFF), UInt8(signature >> 8 & 0xFF), UInt8(signature >> 16 & 0xFF), UInt8(signature >> 24)]
        return (0...(bytes.count - 4)).filter {
            bytes[$0] == b[0] && bytes[$0 + 1] == b[1] && bytes[$0 + 2] == b[2] && bytes[$0 + 3] == b[3]
        }
    }

    /// Rewrites a size, length, count or offset field of a local, central or end record.
    static func mutateLengthField(_ bytes: inout [UInt8], using random: inout SplitMix64) -> Bool {
        let fields: [(UInt32, [(Int, Int)])] = [
            (0x0403_4B50, [(18, 4), (22, 4), (26, 2), (28, 2)]),
            (0x0201_4B50, [(20, 4), (24, 4), (28, 2), (30, 2), (32, 2), (42, 4)]),
            (0x0605_4B50, [(8, 2), (10, 2), (12, 4), (16, 4)]),
        ]
        let (signature, offsets) = fields[Int.random(in: 0..<fields.count, using: &random)]
        let found = positions(of: signature, in: bytes)
        guard let at = found.randomElement(using: &random), let (offset, width) = offsets.randomElement(using: &random),
            at + offset + width <= bytes.count
        else { return false }
        var old: UInt64 = 0
        for index in 0..<width { old |= UInt64(bytes[at + offset + index]) << (8 * index) }
        let interesting: [UInt64] = [
            0, 1, old &+ 1, old &- 1, old &* 2, old / 2, 0xFFFF, 0xFFFF_FFFF, 0x7FFF_FFFF,
            UInt64.random(in: 0...UInt64.max, using: &random),
        ]
        let value = interesting.randomElement(using: &random)!
        for index in 0..<width { bytes[at + offset + index] = UInt8(truncatingIfNeeded: value >> (8 * index)) }
        return true
    }

    /// Changes one byte of an entry's name in its local and central headers alike.
    static func mutateName(_ bytes: inout [UInt8], using random: inout SplitMix64) -> Bool {
        let centrals = positions(of: 0x0201_4B50, in: bytes).filter { $0 + 46 <= bytes.count }
        guard let central = centrals.randomElement(using: &random) else { return false }
        let nameLength = Int(bytes[central + 28]) | Int(bytes[central + 29]) << 8
        let local =
            Int(bytes[central + 42]) | Int(bytes[central + 43]) << 8 | Int(bytes[central + 44]) << 16 | Int(bytes[central + 45]) << 24
        guard nameLength > 0, central + 46 + nameLength <= bytes.count else { return false }
        let index = Int.random(in: 0..<nameLength, using: &random)
        let replacements: [UInt8] = [0x2F, 0x2E, 0x00, 0x5C, 0x1B, 0x0A, 0xFF, 0x20, UInt8.random(in: 0...255, using: &random)]
        let value = replacements.randomElement(using: &random)!
        bytes[central + 46 + index] = value
        if local + 30 + index < bytes.count, bytes[local..<min(bytes.count, local + 4)].elementsEqual([0x50, 0x4B, 0x03, 0x04]) {
            bytes[local + 30 + index] = value
        }
        return true
    }
}
