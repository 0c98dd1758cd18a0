import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance (remote destinations, S3): against rclone's S3 server with signature
/// checking on loopback, through a fault-injecting proxy where faults are wanted.
final class S3DestinationTests: XCTestCase {
    var servers: TestServers!
    var s3: [String: Any] = [:]
    var work = ""

    var endpoint: String { s3["endpoint"] as! String }
    var dataDirectory: String { s3["data_dir"] as! String }
    var credentials: [String: String] {
        [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String, "HOME": work,
        ]
    }

    override func setUpWithError() throws {
        servers = try TestServers(label: "s3")
        s3 = try servers.start("s3")
        work = try TestEnvironment.temporaryDirectory("s3")
    }

    override func tearDownWithError() throws {
        servers.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    private func destination(endpoint: String? = nil, prefix: String = "lib", retry: RetryPolicy = .fastForTests) throws -> S3Destination {
        try S3Destination.make(
            url: "s3://backups/\(prefix)",
            options: DestinationOptions(
                retry: retry, s3Endpoint: endpoint ?? self.endpoint, environment: credentials))
    }

    /// rclone's server answers the listing of unfinished uploads (which prune asks for, to
    /// clean them) with 404 NoSuchUpload when there are none: that is nothing to clean, not
    /// a failure of the whole prune.
    func testPruneWorksAgainstAServerWithoutUploadListing() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store)
        let to = ["--to", "s3://backups/prune", "--s3-endpoint", endpoint]
        for _ in 0..<2 {
            let created = try runStoreBackup(["create", store] + to, environment: credentials)
            XCTAssertEqual(created.status, 0, created.stderr)
        }
        let pruned = try runStoreBackup(["prune", "--keep-last", "1", "--yes"] + to, environment: credentials)
        XCTAssertEqual(pruned.status, 0, pruned.stderr)
        let listed = try runStoreBackup(["list", "--json"] + to, environment: credentials)
        XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as! [Any]).count, 1, listed.stdout)
    }

    func testWrongSecretIsAClearErrorWithoutTheSecret() throws {
        var wrong = credentials
        wrong["AWS_SECRET_ACCESS_KEY"] = "definitely-not-the-secret-0123456789"
        let result = try runStoreBackup(["list", "--to", "s3://backups/app", "--s3-endpoint", endpoint], environment: wrong)
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("rejected the credentials"), result.stderr)
        XCTAssertTrue(result.stderr.contains("s3://backups/app"), "names the destination: \(result.stderr)")
        XCTAssertFalse(result.stderr.contains("definitely-not-the-secret"), result.stderr)
    }

    func testMissingBucketIsAClearError() async throws {
        let result = try runStoreBackup(["list", "--to", "s3://no-such-bucket/x", "--s3-endpoint", endpoint], environment: credentials)
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("does not exist"), result.stderr)

        // Through the library the cause is data: the HTTP status and S3's own error code.
        let missing = try S3Destination.make(
            url: "s3://no-such-bucket/x",
            options: DestinationOptions(
                retry: .fastForTests, s3Endpoint: endpoint, environment: credentials))
        do {
            _ = try await missing.listBackups()
            XCTFail("a missing bucket must fail")
        } catch StoreBackupError.transfer(let failure) {
            XCTAssertEqual(failure.serviceCode, "NoSuchBucket", failure.message)
            XCTAssertEqual(failure.httpStatus, 404, failure.message)
            XCTAssertFalse(failure.isRetryable)
        }
    }

    func testMultipartUploadRoundTripsAndAFailedOneLeavesNothing() async throws {
        let file = work + "/archive.bin"
        try shell("head -c 41943040 /dev/urandom > '\(file)'")  // 40 MiB: above the multipart threshold
        let direct = try destination()
        try await direct.upload(file: file, as: "2026-01-01 000000 Stores.zip", progress: nil)
        let listed = try await direct.listBackups()
        XCTAssertEqual(listed.map(\.name), ["2026-01-01 000000 Stores.zip"])
        XCTAssertEqual(listed.first?.size, 41_943_040)
        try await direct.download("2026-01-01 000000 Stores.zip", to: work + "/back.bin", progress: nil)
        XCTAssertEqual(try sha256(of: work + "/back.bin"), try sha256(of: file))

        // Every part fails: the upload gives up, and the multipart upload it started is gone,
        // as the server's own listing of uploads in progress (asked by curl, not by the code
        // under test) shows.
        let proxy = try servers.start(
            "proxy",
            arguments: [
                "--upstream", "127.0.0.1:\(s3["port"]!)",
                "--plan", try plan([["path_contains": "partNumber=", "fault": "500"]]),
            ])
        let failing = try destination(endpoint: proxy["url"] as? String)
        do {
            try await failing.upload(file: file, as: "2026-01-02 000000 Stores.zip", progress: nil)
            XCTFail("the upload should fail")
        } catch StoreBackupError.transfer(let failure) {
            XCTAssertEqual(failure.kind, .http(status: 500))
            XCTAssertEqual(failure.httpStatus, 500)
        }
        let proxyLog = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8)
        XCTAssertTrue(proxyLog.contains("?uploads"), "a multipart upload was started: \(proxyLog)")
        let remaining = try await direct.listBackups().map(\.name)
        XCTAssertEqual(remaining, ["2026-01-01 000000 Stores.zip"])
        XCTAssertEqual(try S3RawRequest(server: s3).multipartUploads(prefix: "lib/"), [], "the failed multipart upload was aborted")
    }

    func testFaultsDuringUploadAndDownloadStillGiveAnIdenticalStore() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store)
        try shell("head -c 37748736 /dev/urandom > '\(store)/.App_SUPPORT/video.bin'")  // forces a multipart upload
        let proxy = try servers.start(
            "proxy",
            arguments: [
                "--upstream", "127.0.0.1:\(s3["port"]!)", "--plan",
                try plan(
                    [
                        ["probability": 0.15, "fault": "500"],
                        ["probability": 0.1, "fault": "429"],
                        ["probability": 0.1, "fault": "reset", "phase": "request"],
                        ["method": "GET", "probability": 0.3, "fault": "reset", "phase": "response"],
                    ], seed: 11),
            ])
        let via = ["s3://backups/faults", "--s3-endpoint", proxy["url"] as! String]
        let created = try runStoreBackup(["create", store, "--to"] + via, environment: credentials)
        XCTAssertEqual(created.status, 0, created.stderr)
        let restored = try runStoreBackup(["restore", "latest", work + "/Restored", "--yes", "--from"] + via, environment: credentials)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        // Every file, and every database's rows, as they were.
        XCTAssertEqual(
            try StoreFixture.describe(work + "/Restored", includeJournals: false),
            try StoreFixture.describe(store, includeJournals: false))
        XCTAssertEqual(try StoreFixture.query(work + "/Restored/App.sqlite", "PRAGMA integrity_check"), "ok")
        for (database, sql) in [
            (
                "App.sqlite",
                "SELECT (SELECT count(*) || ':' || sum(balance) FROM accounts) || '/' || (SELECT count(*) || ':' || sum(length(note)) FROM log)"
            ),
            ("Settings.sqlite", "SELECT group_concat(k || '=' || v) FROM kv"),
        ] {
            XCTAssertEqual(
                try StoreFixture.query(work + "/Restored/" + database, sql), try StoreFixture.query(store + "/" + database, sql), database)
        }
        let log = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8)
        XCTAssertTrue(log.contains("\"fault\": \"") || log.contains("\"fault\":\""), "faults were injected")
    }

    /// Issue 4, acceptance 3: a 1 GiB archive goes up as a multipart upload with a small peak RSS.
    func testOneGiBUploadStaysUnder64MiB() throws {
        let store = work + "/Big"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 1)
        try shell("head -c 1073741824 /dev/urandom > '\(store)/.App_SUPPORT/big.bin'")
        let peak = try peakRSSKiBOfStoreBackup(
            ["create", store, "--to", "s3://backups/big", "--s3-endpoint", endpoint], environment: credentials)
        XCTAssertLessThan(peak, 64 * 1024, "peak RSS \(peak) KiB")
        let listing = try runStoreBackup(
            ["list", "--json", "--to", "s3://backups/big", "--s3-endpoint", endpoint], environment: credentials)
        let rows = try JSONSerialization.jsonObject(with: Data(listing.stdout.utf8)) as! [[String: Any]]
        XCTAssertGreaterThan(rows.first?["size"] as? Int ?? 0, 1 << 30)
    }

    // MARK: helpers

    private func plan(_ rules: [[String: Any]], seed: Int = 1) throws -> String {
        let path = work + "/plan-\(UUID().uuidString.prefix(6)).json"
        try JSONSerialization.data(withJSONObject: ["seed": seed, "rules": rules]).write(to: URL(fileURLWithPath: path))
        return path
    }

    private func sha256(of path: String) throws -> String {
        SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)).map { String(format: "%02x", $0) }
            .joined()
    }
}

extension RetryPolicy {
    /// Quick retries so fault tests finish in seconds.
    static let fastForTests = RetryPolicy(requestAttempts: 4, operationAttempts: 2, initialDelay: 0.02, maximumDelay: 0.1)
}
