import Foundation
import XCTest

@testable import StoreBackup

/// `create DIR --to A --to B …`: one archive published to every destination (two local
/// folders and rclone's S3 server on loopback), each outcome reported, and a failing one
/// making the exit status non-zero without stopping the others.
final class MirroredCreateTests: XCTestCase {
    var servers: TestServers!
    var s3: [String: Any] = [:]
    var work = ""

    var endpoint: String { s3["endpoint"] as! String }
    var environment: [String: String] {
        [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String, "HOME": work,
            "STOREBACKUP_RETRY_ATTEMPTS": "1", "STOREBACKUP_RETRY_OPERATIONS": "1",
            "STOREBACKUP_WEBDAV_PASSWORD": "unused",
        ]
    }

    override func setUpWithError() throws {
        servers = try TestServers(label: "mirrored-create")
        s3 = try servers.start("s3")
        work = try TestEnvironment.temporaryDirectory("mirrored-create")
        try StoreFixture.make(at: work + "/Stores", logRows: 200, blobCount: 3)
    }

    override func tearDownWithError() throws {
        servers.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    func create(_ destinations: [String]) throws -> (status: Int32, summary: [String: Any], stderr: String) {
        let result = try runStoreBackup(
            ["create", work + "/Stores", "--json", "--s3-endpoint", endpoint]
                + destinations.flatMap { ["--to", $0] }, environment: environment)
        let summary = (try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8))) as? [String: Any] ?? [:]
        return (result.status, summary, result.stderr)
    }

    func list(_ destination: String) throws -> [String: Int64] {
        let result = try runStoreBackup(["list", "--json", "--from", destination, "--s3-endpoint", endpoint], environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [[String: Any]]
        return Dictionary(uniqueKeysWithValues: rows.map { ($0["name"] as! String, ($0["size"] as! NSNumber).int64Value) })
    }

    func testCreateToTwoFoldersAndS3PublishesTheSameArchiveToEach() throws {
        let first = work + "/first", second = work + "/second", bucket = "s3://backups/mirrored"
        let created = try create([first, second, bucket])
        XCTAssertEqual(created.status, 0, created.stderr)
        let rows = try XCTUnwrap(created.summary["destinations"] as? [[String: Any]], "\(created.summary)")
        XCTAssertEqual(rows.map { $0["status"] as? String }, ["published", "published", "published"])
        XCTAssertEqual(rows.map { $0["destination"] as? String }.first, first, "in the order given")
        let name = try XCTUnwrap(created.summary["name"] as? String)
        XCTAssertEqual(Set(rows.compactMap { $0["name"] as? String }), [name], "one name everywhere")
        XCTAssertEqual(created.summary["failed"] as? Int, 0)

        let size = try XCTUnwrap(try list(first)[name])
        XCTAssertEqual(try list(second), [name: size])
        XCTAssertEqual(try list(bucket), [name: size])
        // The same bytes: byte-identical folders, and S3's copy verifies.
        XCTAssertEqual(
            try Data(contentsOf: URL(fileURLWithPath: first + "/" + name)),
            try Data(contentsOf: URL(fileURLWithPath: second + "/" + name)))
        let verified = try runStoreBackup(["verify", "latest", "--from", bucket, "--s3-endpoint", endpoint], environment: environment)
        XCTAssertEqual(verified.status, 0, verified.stdout + verified.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: first), [name], "no temporary left behind")

        // The text form: one line per destination on stderr, the name on stdout.
        let text = try runStoreBackup(
            ["create", work + "/Stores", "--to", first, "--to", bucket, "--s3-endpoint", endpoint], environment: environment)
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertEqual(text.stderr.components(separatedBy: "storebackup: published").count - 1, 2, text.stderr)
        XCTAssertEqual(try list(bucket).count, 2)
    }

    /// `create --store NAME --to A --to B`: the given destinations replace the configured one,
    /// and the configured run publishes to both and records each in the state.
    func testConfiguredCreateWithSeveralToPublishesToEach() throws {
        let configured = work + "/configured", local = work + "/given", bucket = "s3://backups/given"
        let path = work + "/storebackup.yml"
        try """
        state-directory: \(work)/state
        s3-endpoint: \(endpoint)
        schedule: daily 02:30
        stores:
          - {name: app, path: \(work)/Stores, destination: \(configured)}
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let run = try runStoreBackup(
            ["create", "--config", path, "--store", "app", "--to", bucket, "--to", local], environment: environment)
        XCTAssertEqual(run.status, 0, run.stderr)
        let name = run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try list(local).keys.sorted(), [name])
        XCTAssertEqual(try list(bucket).keys.sorted(), [name])
        XCTAssertFalse(FileManager.default.fileExists(atPath: configured), "the configured destination was replaced")
        let state = try XCTUnwrap(BackupStateStore(directory: work + "/state").load("app"))
        XCTAssertEqual(state.destinations?.count, 2, "\(state)")
        XCTAssertEqual(state.lastVerifySuccess?.backups, [name], "checked after create")
        XCTAssertEqual(state.lastVerifySuccess?.destination, local, "the local copy, though S3 came first: no download")
    }

    func testOneFailingDestinationIsReportedAndTheOthersStillGetTheBackup() throws {
        let closedPort = try WebDAVDestinationTests.unusedPort()
        let broken = "webdav://backup@127.0.0.1:\(closedPort)/backups"
        let local = work + "/local", bucket = "s3://backups/partial"
        let created = try create([local, broken, bucket])
        XCTAssertEqual(created.status, 1, created.stderr)
        let rows = try XCTUnwrap(created.summary["destinations"] as? [[String: Any]], "\(created.summary)")
        XCTAssertEqual(rows.map { $0["status"] as? String }, ["published", "failed", "published"])
        XCTAssertTrue((rows[1]["error"] as? String)?.contains("127.0.0.1:\(closedPort)") == true, "\(rows[1])")
        XCTAssertNil(rows[1]["name"])
        XCTAssertEqual(created.summary["failed"] as? Int, 1)
        XCTAssertTrue(created.stderr.contains("not published to 1 of 3 destinations"), created.stderr)
        let name = try XCTUnwrap(created.summary["name"] as? String)
        XCTAssertEqual(try list(local).keys.sorted(), [name])
        XCTAssertEqual(try list(bucket).keys.sorted(), [name])

        let text = try runStoreBackup(["create", work + "/Stores", "--to", broken, "--to", local], environment: environment)
        XCTAssertEqual(text.status, 1)
        XCTAssertTrue(text.stderr.contains("FAILED to publish to") && text.stderr.contains("127.0.0.1:\(closedPort)"), text.stderr)
        XCTAssertTrue(text.stderr.contains("storebackup: published"), text.stderr)
        XCTAssertEqual(try list(local).count, 2)
    }
}
