import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance (several destinations, the 3-2-1 rule): `copy` between a local folder and
/// rclone's S3 server, `restore --from A --from B` falling back, and a configured store
/// with two destinations of which one fails during the run.
final class MultiDestinationTests: XCTestCase {
    var servers: TestServers!
    var s3: [String: Any] = [:]
    var work = ""

    var endpoint: String { s3["endpoint"] as! String }
    /// S3 credentials, fast retries (an unreachable destination fails in a second or two),
    /// and a WebDAV password so a `webdav://` destination on a closed port can be made.
    var environment: [String: String] {
        [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String, "HOME": work,
            "STOREBACKUP_RETRY_ATTEMPTS": "1", "STOREBACKUP_RETRY_OPERATIONS": "1",
            "STOREBACKUP_WEBDAV_PASSWORD": "unused",
        ]
    }
    /// A destination nothing listens on.
    let unreachable = "webdav://backup@127.0.0.1:1/backups"

    override func setUpWithError() throws {
        servers = try TestServers(label: "multi")
        s3 = try servers.start("s3")
        work = try TestEnvironment.temporaryDirectory("multi")
    }

    override func tearDownWithError() throws {
        servers.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    private func copy(_ arguments: [String]) throws -> (status: Int32, rows: [[String: Any]], stderr: String) {
        let result = try runStoreBackup(["copy"] + arguments + ["--s3-endpoint", endpoint, "--json"], environment: environment)
        let rows = (try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8))) as? [[String: Any]] ?? []
        return (result.status, rows, result.stderr)
    }

    private func list(_ destination: String) throws -> [String: Int64] {
        let result = try runStoreBackup(["list", "--json", "--from", destination, "--s3-endpoint", endpoint], environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [[String: Any]]
        return Dictionary(uniqueKeysWithValues: rows.map { ($0["name"] as! String, ($0["size"] as! NSNumber).int64Value) })
    }

    private func createBackup(into folder: String) throws -> String {
        let store = work + "/Stores"
        if !FileManager.default.fileExists(atPath: store) { try StoreFixture.make(at: store) }
        let created = try runStoreBackup(["create", store, "--to", folder], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testCopyLocalToS3AndBackIsCheckedIdempotentAndNeverOverwrites() throws {
        let local = work + "/local"
        let name = try createBackup(into: local)
        let original = try Data(contentsOf: URL(fileURLWithPath: local + "/" + name))
        let bucket = "s3://backups/copies"

        let first = try copy(["latest", "--from", local, "--to", bucket])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(first.rows.map { $0["status"] as? String }, ["copied"])
        XCTAssertEqual(try list(bucket), [name: Int64(original.count)])

        let again = try copy([name, "--from", local, "--to", bucket])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(again.rows.map { $0["status"] as? String }, ["already there"])

        // Back from S3 into an empty folder: the bytes are the original's.
        let back = work + "/back"
        let all = try copy(["--all", "--from", bucket, "--to", back])
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(all.rows.map { $0["status"] as? String }, ["copied"])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: back + "/" + name)), original)
        let allAgain = try copy(["--all", "--from", bucket, "--to", back])
        XCTAssertEqual(allAgain.rows.map { $0["status"] as? String }, ["already there"])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: back), [name], "no temporaries left")

        // A different backup under the same name is never overwritten, in either direction.
        let impostor = work + "/impostor"
        try FileManager.default.createDirectory(atPath: impostor, withIntermediateDirectories: true)
        try Data("not the backup".utf8).write(to: URL(fileURLWithPath: impostor + "/" + name))
        let toS3 = try copy([name, "--from", impostor, "--to", bucket])
        XCTAssertEqual(toS3.status, 1)
        XCTAssertEqual(toS3.rows.first?["status"] as? String, "failed")
        XCTAssertTrue((toS3.rows.first?["error"] as? String ?? "").contains("refusing to overwrite"), "\(toS3.rows)")
        XCTAssertEqual(try list(bucket), [name: Int64(original.count)], "the S3 copy is untouched")
        let fromS3 = try copy(["--all", "--from", bucket, "--to", impostor])
        XCTAssertEqual(fromS3.status, 1)
        XCTAssertEqual(try String(contentsOfFile: impostor + "/" + name, encoding: .utf8), "not the backup")

        // The text form says what happened; a missing name is a one-line error.
        let text = try runStoreBackup(["copy", name, "--from", local, "--to", bucket, "--s3-endpoint", endpoint], environment: environment)
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertTrue(text.stdout.contains("already there: \(name)"), text.stdout)
        let missing = try runStoreBackup(["copy", "2001-01-01 000000 Stores.zip", "--from", local, "--to", back], environment: environment)
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderr.hasPrefix("storebackup: error: no backup named"), missing.stderr)
    }

    func testRestoreFallsBackToTheNextDestination() throws {
        let bucket = "s3://backups/fallback"
        let local = work + "/local"
        let name = try createBackup(into: local)
        XCTAssertEqual(try copy([name, "--from", local, "--to", bucket]).status, 0)
        let empty = work + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)

        let restored = try runStoreBackup(
            [
                "restore", "latest", work + "/Restored", "--yes", "--from", unreachable, "--from", empty,
                "--from", bucket, "--s3-endpoint", endpoint,
            ], environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertTrue(restored.stderr.contains("127.0.0.1:1"), "the unreachable one is reported: \(restored.stderr)")
        XCTAssertTrue(restored.stderr.contains("restoring \"\(name)\" from s3://backups/fallback"), restored.stderr)
        XCTAssertEqual(
            try StoreFixture.describe(work + "/Restored", includeJournals: false, includeDatabaseContent: false),
            try StoreFixture.describe(work + "/Stores", includeJournals: false, includeDatabaseContent: false))

        // None holding the backup: refused, nothing created.
        let none = try runStoreBackup(
            ["restore", name, work + "/Other", "--yes", "--from", unreachable, "--from", empty],
            environment: environment)
        XCTAssertEqual(none.status, 1)
        XCTAssertTrue(none.stderr.contains("no destination could provide"), none.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/Other"))

        // Other commands still take one destination.
        let two = try runStoreBackup(["list", "--from", local, "--from", empty], environment: environment)
        XCTAssertEqual(two.status, 1)
        XCTAssertTrue(two.stderr.contains("takes one destination"), two.stderr)
    }

    /// A configured store with two destinations: both take the backup (retention at each);
    /// then one is unreachable during the run: the other still gets the backup, the run
    /// fails (exit status, on-failure hook naming it, metrics), and status shows both.
    func testConfiguredStoreWithTwoDestinationsSurvivesOneFailing() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store)
        let local = work + "/local"
        let bucket = "s3://backups/mirror"
        let closedPort = try WebDAVDestinationTests.unusedPort()
        let broken = "webdav://backup@127.0.0.1:\(closedPort)/backups"
        let metricsFile = work + "/storebackup.prom"
        let marker = work + "/failure-event.json"
        func configuration(_ second: String) throws -> String {
            let path = work + "/storebackup.yml"
            try """
            state-directory: \(work)/state
            s3-endpoint: \(endpoint)
            metrics: {file: \(metricsFile)}
            schedule: daily 02:30
            stores:
              - name: app
                path: \(store)
                destinations: [\(local), "\(second)"]
                retention: {keep-last: 1}
                hooks:
                  on-failure: {command: "printf '%s|%s' \\"$STOREBACKUP_EVENT\\" \\"$STOREBACKUP_DESTINATION\\" > \(marker)"}
            """.write(toFile: path, atomically: false, encoding: .utf8)
            return path
        }

        var names: [String] = []
        for run in 0..<2 {
            // A change between runs, so the second archive differs even within the same second.
            let database = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
            try database.execute("CREATE TABLE run\(run)(x)", operation: "test change")
            database.close()
            let run = try runStoreBackup(
                ["create", "--config", try configuration(bucket), "--store", "app", "--prune"], environment: environment)
            XCTAssertEqual(run.status, 0, run.stderr)
            names.append(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        XCTAssertNotEqual(names[0], names[1])
        // The same archive at both, and keep-last 1 applied at each.
        XCTAssertEqual(try list(local).keys.sorted(), [names[1]])
        XCTAssertEqual(try list(bucket), try list(local))
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "no failure, no hook")

        let failing = try runStoreBackup(["create", "--config", try configuration(broken), "--store", "app"], environment: environment)
        XCTAssertEqual(failing.status, 1, failing.stderr)
        XCTAssertTrue(failing.stderr.contains("storebackup: error:") && failing.stderr.contains("127.0.0.1:\(closedPort)"), failing.stderr)
        let atLocal = try list(local).keys.sorted()
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: local).sorted(), atLocal,
            "the archive built in the local folder left no temporary behind")
        XCTAssertEqual(atLocal.count, 2, "the local folder got the backup despite the other failing: \(atLocal)")
        let event = try String(contentsOfFile: marker, encoding: .utf8).split(separator: "|").map(String.init)
        XCTAssertEqual(event.first, "failure")
        XCTAssertTrue(event.last?.contains("127.0.0.1:\(closedPort)") == true, "\(event)")
        XCTAssertFalse(event.last?.contains(local) == true, "only the failed destination is named: \(event)")

        let metrics = try String(contentsOfFile: metricsFile, encoding: .utf8).split(separator: "\n")
        XCTAssertTrue(
            metrics.contains {
                $0.hasPrefix("storebackup_backups_total{") && $0.contains("outcome=\"failure\"") && $0.contains("127.0.0.1:\(closedPort)")
            },
            metrics.joined(separator: "\n"))
        XCTAssertTrue(
            metrics.contains {
                $0.hasPrefix("storebackup_backups_total{") && $0.contains("outcome=\"success\"") && $0.contains("destination=\"\(local)\"")
            },
            metrics.joined(separator: "\n"))

        let status = try runStoreBackup(["status", "--json", "--config", try configuration(broken)], environment: environment)
        XCTAssertEqual(status.status, 0, status.stderr)
        let row = try XCTUnwrap((JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [[String: Any]])?.first)
        let destinations = try XCTUnwrap(row["destinations"] as? [String: [String: Any]], status.stdout)
        XCTAssertEqual((destinations[local]?["lastSuccess"] as? [String: Any])?["backup"] as? String, atLocal.last)
        let brokenKey = try XCTUnwrap(destinations.keys.first { $0.contains("127.0.0.1:\(closedPort)") }, status.stdout)
        XCTAssertNotNil(destinations[brokenKey]?["lastFailure"] as? [String: Any], status.stdout)
        XCTAssertNotNil(destinations.keys.first { $0.contains("mirror") }, "the S3 destination's earlier success is kept: \(status.stdout)")
        XCTAssertNotNil(row["lastFailure"] as? [String: Any], status.stdout)
        let text = try runStoreBackup(["status", "--config", try configuration(broken)], environment: environment)
        XCTAssertTrue(text.stdout.contains("FAILING") && text.stdout.contains(local), text.stdout)

        // `prune` with the configuration applies keep-last 1 at each destination of the store
        // (two local folders here: rclone's S3 server cannot list multipart uploads, which prune asks).
        let second = work + "/second"
        XCTAssertEqual(try copy(["--all", "--from", local, "--to", second]).status, 0)
        let pruned = try runStoreBackup(["prune", "--config", try configuration(second), "--yes"], environment: environment)
        XCTAssertEqual(pruned.status, 0, pruned.stderr)
        XCTAssertEqual(try list(local).keys.sorted(), [atLocal.last!])
        XCTAssertEqual(try list(second).keys.sorted(), [atLocal.last!])
    }

    /// A real WebDAV server that refuses the credentials during a mirrored run: S3 still gets
    /// the backup; then `copy --all` brings it to the WebDAV server (checked by its read-back).
    func testRefusingWebDAVServerInAMirroredRunThenCopyToIt() throws {
        let webdav = try servers.start("webdav")
        let dav = "webdav://127.0.0.1:\(webdav["port"] as! Int)/dav/mirror"
        var right = environment
        right["STOREBACKUP_WEBDAV_USER"] = webdav["user"] as? String
        right["STOREBACKUP_WEBDAV_PASSWORD"] = webdav["password"] as? String
        var wrong = right
        wrong["STOREBACKUP_WEBDAV_PASSWORD"] = "not-the-password-4711"
        let store = work + "/Stores"
        try StoreFixture.make(at: store)
        let bucket = "s3://backups/with-dav"
        let path = work + "/storebackup.yml"
        try """
        state-directory: \(work)/state
        s3-endpoint: \(endpoint)
        schedule: daily 02:30
        stores:
          - {name: app, path: \(store), destinations: ["\(dav)", "\(bucket)"]}
        """.write(toFile: path, atomically: false, encoding: .utf8)

        let run = try runStoreBackup(["create", "--config", path, "--store", "app"], environment: wrong)
        XCTAssertEqual(run.status, 1, run.stderr)
        XCTAssertTrue(run.stderr.contains("rejected the credentials") || run.stderr.contains("401"), run.stderr)
        XCTAssertFalse(run.stderr.contains("not-the-password-4711"), run.stderr)
        let atS3 = try list(bucket)
        XCTAssertEqual(atS3.count, 1, "S3 took the backup although the first destination refused")

        let copied = try runStoreBackup(
            ["copy", "--all", "--from", bucket, "--to", dav, "--s3-endpoint", endpoint, "--json"], environment: right)
        XCTAssertEqual(copied.status, 0, copied.stderr)
        let again = try runStoreBackup(["copy", "--all", "--from", bucket, "--to", dav, "--s3-endpoint", endpoint], environment: right)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stdout.contains("already there: \(atS3.keys.first!)"), again.stdout)
        let listed = try runStoreBackup(["list", "--json", "--from", dav], environment: right)
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as! [[String: Any]]
        XCTAssertEqual(rows.map { $0["name"] as! String }, Array(atS3.keys))
        XCTAssertEqual(rows.map { ($0["size"] as! NSNumber).int64Value }, Array(atS3.values))
    }
}

/// `destinations:` in the configuration: read in order, a store's own setting replacing the
/// top-level default, and mistakes named with their key.
final class MultiDestinationConfigurationTests: XCTestCase {
    func parse(_ yaml: String) throws -> BackupConfiguration {
        try BackupConfiguration.parse(yaml: yaml, file: "/etc/test.yml", environment: [:])
    }

    func testDestinationsAreReadInOrderAndAStoreOverridesTheDefault() throws {
        let configuration = try parse(
            """
            schedule: daily 02:30
            destinations: [/var/backups, "s3://bucket/app"]
            stores:
              - {name: a, path: /srv/a}
              - {name: b, path: /srv/b, destination: /mnt/usb}
              - {name: c, path: /srv/c, destinations: [/x, /y, /z]}
            """)
        XCTAssertEqual(
            configuration.stores.map(\.allDestinations), [["/var/backups", "s3://bucket/app"], ["/mnt/usb"], ["/x", "/y", "/z"]])
        XCTAssertEqual(configuration.stores[0].destination, "/var/backups")
        XCTAssertEqual(configuration.stores[0].mirrors, ["s3://bucket/app"])
        XCTAssertEqual(configuration.stores[1].mirrors, [])
    }

    func testMistakesAreNamed() throws {
        let cases: [(String, String)] = [
            ("destination: /a\n    destinations: [/b]", "stores[0].destinations: give either `destination` or `destinations`, not both"),
            ("destinations: []", "stores[0].destinations: must be a non-empty list"),
            ("destinations: /a", "stores[0].destinations: must be a non-empty list"),
            ("destinations: [/a, /a]", "stores[0].destinations[1]: \"/a\" is listed twice"),
            ("destinations: [/a, \"\"]", "stores[0].destinations[1]: must not be empty"),
        ]
        for (setting, expected) in cases {
            XCTAssertThrowsError(
                try parse(
                    """
                    schedule: daily 02:30
                    stores:
                      - name: a
                        path: /srv/a
                        \(setting)
                    """)
            ) { error in
                XCTAssertTrue("\(error)".contains(expected), "\(setting): \(error)")
            }
        }
    }
}
