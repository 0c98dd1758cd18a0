import Foundation
import XCTest

@testable import StoreBackup

/// Issue 54, finding 1: a streaming restore (parallel ranged GETs into the staging file) on
/// S3 (rclone) and WebDAV (Apache) meets answers that lie, made by the fault proxy: a body
/// with one byte inverted, a 206 for another range than the one asked for, and a 206 shorter
/// than asked. Each body agrees with its own headers, so only the client's checks can tell.
/// A restore may refuse (an error naming the backup, the live store as it was, nothing left
/// behind) or fetch again and restore the store exactly; each case pins which one the code
/// does, so a change of either shows here. The proxy's log shows that each fault struck, so
/// no case passes without meeting its fault.
final class LyingAnswerRestoreTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var local: String { work + "/local" }
    var backupName = ""
    var archiveSize: Int64 = 0
    var reference: [String: StoreFixture.Node] = [:]
    var restores = 0

    /// Quick retries: a lie is not healed by waiting.
    static let retry = RetryPolicy(budget: 30, initialDelay: 0.02, maximumDelay: 0.1)

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("lying")
        try StoreFixture.make(at: store, logRows: 300, blobCount: 2)
        // Incompressible, so the archive spans several 2 MiB chunks, each one GET or part of one.
        var generator = SplitMix64(seed: 5401)
        var blob = Data(capacity: 8 << 20)
        for _ in 0..<((8 << 20) / 8) { withUnsafeBytes(of: generator.next()) { blob.append(contentsOf: $0) } }
        try blob.write(to: URL(fileURLWithPath: store + "/.App_SUPPORT/_EXTERNAL_DATA/large"))
        let created = try runStoreBackup(["create", store, "--to", local], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        archiveSize = Int64(try FileSystem.lstatInfo(local + "/" + backupName).st_size)
        // More than one GET may ask for, so a whole download is told from any range in the log.
        XCTAssertGreaterThan(archiveSize, RangedRead.maxRequestBytes)
        reference = try StoreFixture.describe(store)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testS3() async throws {
        let servers = try TestServers(label: "lying-s3")
        defer { servers.stop() }
        try await check(ContractBackend.s3(try servers.start("s3"), work: work), servers: servers)
    }

    func testWebDAV() async throws {
        let servers = try TestServers(label: "lying-webdav")
        defer { servers.stop() }
        try await check(ContractBackend.webDAV(try servers.start("webdav"), work: work), servers: servers)
    }

    /// What a restore that met a lie must end in.
    enum Outcome {
        /// The answer cannot be told from the truth by its headers: the entry's CRC and
        /// SHA-256 catch it, and the restore fails before the swap.
        case refused
        /// The answer is not the range asked for (``RangedRead``'s checks): the backup is
        /// downloaded whole instead, and restored.
        case fetchedAgain
    }

    /// Each fault on the second GET of the backup (the first is the reader's wait for the
    /// last chunk, with the end records), then a restore over a live store.
    private func check(_ backend: ContractBackend, servers: TestServers) async throws {
        let copy = work + "/upload.zip"
        try FileManager.default.copyItem(atPath: local + "/" + backupName, toPath: copy)
        try await backend.make("lying", nil, Self.retry).upload(file: copy, as: backupName, progress: nil)
        let zipGET: [String: Any] = ["method": "GET", "path_contains": "Stores.zip", "requests": [2]]
        let cases: [(fault: String, options: [String: Any], logged: String, outcome: Outcome)] = [
            ("flip", ["phase": "response"], "flip response body byte ", .refused),
            ("shift206", ["shift": 4096], "shift206 (bytes=", .fetchedAgain),
            ("short206", ["short_by": 1000], "short206 (bytes=", .fetchedAgain),
        ]
        for (fault, options, logged, outcome) in cases {
            let label = "[\(backend.label) \(fault)]"
            let rule = zipGET.merging(["fault": fault]) { $1 }.merging(options) { $1 }
            let proxy = try ContractProxy(servers: servers, backend: backend, rules: [rule], work: work)
            try await restoreOverLiveStore(try backend.make("lying", proxy.port, Self.retry), expecting: outcome, label: label)
            let gets = proxy.entries { !ContractProxy.faults($0).isEmpty }.filter {
                ($0["request"] as? String)?.hasPrefix("GET") == true && ($0["request"] as? String)?.contains("Stores.zip") == true
            }
            let struck = ContractProxy.faults(gets)
            XCTAssertEqual(struck.count, 1, "\(label) the fault struck once: \(struck)")
            XCTAssertTrue(struck.first?.hasPrefix(logged) == true, "\(label) \(struck)")
            if fault != "flip" {
                XCTAssertEqual(gets.first { $0["fault"] is String }?["status"] as? Int, 206, "\(label) a 206 came back: \(gets)")
            }
            // Fetched again: one answer carried the whole backup, more than any range asks for.
            let whole = gets.filter { ($0["down_bytes"] as? NSNumber)?.int64Value == archiveSize }
            XCTAssertEqual(whole.count, outcome == .fetchedAgain ? 1 : 0, "\(label) whole downloads: \(gets)")
        }
    }

    /// Restores the backup over a live store in a folder of its own, expecting `outcome`:
    /// the store backed up, exactly; or an error naming the backup with the live store as it
    /// was. Either way no `_New` or staging file is left.
    private func restoreOverLiveStore(_ destination: any BackupDestination, expecting outcome: Outcome, label: String) async throws {
        restores += 1
        let parent = work + "/restore-\(restores)"
        let target = parent + "/Stores"
        try StoreFixture.make(at: target, logRows: 10, blobCount: 1)
        let before = try StoreFixture.describe(target)
        do {
            let result = try await StoreHelper(storesDirectory: target, destination: destination).restore(backupName)
            XCTAssertEqual(outcome, .fetchedAgain, "\(label) restored from a damaged answer")
            XCTAssertEqual(result.backupName, backupName, label)
            XCTAssertEqual(try StoreFixture.describe(target), reference, "\(label) restored: the store backed up, exactly")
        } catch let error as StoreBackupError {
            XCTAssertEqual(outcome, .refused, "\(label) refused: \(error)")
            XCTAssertTrue(error.description.contains("backup \"\(backupName)\" is damaged"), "\(label) \(error)")
            XCTAssertEqual(try StoreFixture.describe(target), before, "\(label) refused: the live store is untouched")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target + "_New"), label)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: parent).filter {
                $0.contains("storebackup-") && !$0.hasSuffix("-lock") && !$0.hasSuffix("-replaced.json")
            },
            [], "\(label) no staging file left")
    }
}
