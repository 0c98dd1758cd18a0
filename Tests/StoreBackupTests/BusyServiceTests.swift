import Foundation
import XCTest

@testable import StoreBackup

/// Issue 36, point 7: services that answer "busy, try later" to many requests delay a
/// backup, they do not fail it. The Dropbox emulator answers half of all write calls with
/// 409 `too_many_write_operations`; S3 (rclone's server behind the fault proxy) answers a
/// third of all requests with 503 `SlowDown`. Large creates (an upload session, a
/// multipart upload), deletes and prunes all succeed, through the command line with its
/// default retry budget by time, for a few seeds (`STOREBACKUP_BUSY_SEEDS=N` runs N).
/// The servers' own records prove the busy answers were given.
final class BusyServiceTests: XCTestCase {
    var work = ""
    var store = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("busy")
        store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 300, blobCount: 3)
        // Tens of MB that do not compress: several upload-session chunks, several S3 parts.
        try shell("head -c 41943040 /dev/urandom > '\(store)/.App_SUPPORT/video.bin'")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// The seeds to run: three by default, more when asked.
    var seeds: [Int] {
        get throws {
            let count = try TestEnvironment.count("STOREBACKUP_BUSY_SEEDS", default: 3, floor: 1)
            return Array(1...count)
        }
    }

    /// The budget the commands run with: the documented one, given explicitly.
    let budget = ["--retry-for", "5m"]

    func testDropboxBusyWithHalfOfAllWrites() throws {
        let emulator = try DropboxEmulatorClient(label: "busy-dropbox")
        defer { emulator.stop() }
        let environment = emulator.environment(home: work, token: emulator.accessToken)
        let writes = ["/2/files/upload", "/2/files/upload_session/*", "/2/files/delete_v2"]
        for seed in try seeds {
            let to = ["--to", "dropbox:///Busy\(seed)"]
            try emulator.control("faults", ["kinds": ["409_write"], "probability": 0.5, "seed": seed, "routes": writes, "retry_after": 0])
            let names = try createFour(to: to, environment: environment, seed: seed)
            try deleteAndPrune(names, to: to, environment: environment, seed: seed)
            let injected = try emulator.control("faults", method: "GET")["injected"] as? Int ?? 0
            let busy = try emulator.log().filter { $0["fault"] as? String == "409_write" }
            XCTAssertGreaterThan(injected, 3, "seed \(seed): the emulator answered busy to writes")
            XCTAssertTrue(
                busy.contains { ($0["route"] as? String ?? "").hasPrefix("/2/files/upload_session/") },
                "seed \(seed): the upload session itself met busy answers: \(busy.map { $0["route"] ?? "" })")
            try emulator.control("faults", [:])
        }
        // A few deletes per seed: across the seeds, some of them met busy answers too.
        let busyDeletes = try emulator.log().filter {
            $0["route"] as? String == "/2/files/delete_v2" && $0["fault"] as? String == "409_write"
        }
        XCTAssertGreaterThan(busyDeletes.count, 0, "deletes met busy answers")
    }

    func testS3SlowDownToAThirdOfRequests() throws {
        let servers = try TestServers(label: "busy-s3")
        defer { servers.stop() }
        let s3 = try servers.start("s3")
        let environment = [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String, "HOME": work,
        ]
        let slowDown =
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
            + "<Message>Please reduce your request rate.</Message></Error>"
        var busyDeletes = 0
        for seed in try seeds {
            let plan = work + "/plan-\(seed).json"
            // Real S3 sends no Retry-After with SlowDown: the client's own backoff must do.
            try JSONSerialization.data(withJSONObject: [
                "seed": seed,
                "rules": [
                    ["probability": 1.0 / 3.0, "fault": "503", "retry_after": NSNull(), "body": slowDown]
                ],
            ]).write(to: URL(fileURLWithPath: plan))
            let proxy = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(s3["port"]!)", "--plan", plan])
            let to = ["--to", "s3://backups/busy\(seed)", "--s3-endpoint", proxy["url"] as! String]
            let names = try createFour(to: to, environment: environment, seed: seed)
            try deleteAndPrune(names, to: to, environment: environment, seed: seed)
            let log = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8)
            let entries = log.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let refused = entries.filter { $0["status"] as? Int == 503 }
            XCTAssertGreaterThan(refused.count, 5, "seed \(seed): the proxy answered SlowDown")
            XCTAssertTrue(
                refused.contains { ($0["request"] as? String ?? "").contains("partNumber=") },
                "seed \(seed): parts of the multipart upload met SlowDown")
            busyDeletes += refused.filter { ($0["request"] as? String ?? "").hasPrefix("DELETE ") }.count
        }
        XCTAssertGreaterThan(busyDeletes, 0, "deletes met SlowDown")
    }

    /// A service that stays busy: the operation gives up when its budget is spent, and
    /// says so (with how to give it longer), having retried more than once.
    func testASpentBudgetIsReportedWithTheWayToGiveMore() throws {
        let servers = try TestServers(label: "busy-budget")
        defer { servers.stop() }
        let s3 = try servers.start("s3")
        let environment = [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String, "HOME": work,
        ]
        let plan = work + "/plan-always.json"
        try JSONSerialization.data(withJSONObject: ["rules": [["fault": "503", "retry_after": NSNull()]]])
            .write(to: URL(fileURLWithPath: plan))
        let proxy = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(s3["port"]!)", "--plan", plan])
        let listed = try runStoreBackup(
            ["list", "--to", "s3://backups/app", "--s3-endpoint", proxy["url"] as! String, "--retry-for", "3s"],
            environment: environment)
        XCTAssertNotEqual(listed.status, 0)
        XCTAssertTrue(listed.stderr.contains("HTTP 503"), listed.stderr)
        XCTAssertTrue(listed.stderr.contains("over 3s; --retry-for or retry-for: allows longer"), listed.stderr)
        let log = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8)
        XCTAssertGreaterThan(log.split(separator: "\n").count, 2, "the request was retried before giving up")
    }

    // MARK: the runs

    /// Four creates of the large store; returns the backups' names, each listed with its size.
    private func createFour(to: [String], environment: [String: String], seed: Int) throws -> [String] {
        var names: [String] = []
        for _ in 0..<4 {
            let created = try runStoreBackup(["create", store] + to + budget, environment: environment)
            XCTAssertEqual(created.status, 0, "seed \(seed): \(created.stderr)")
            names.append(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let listed = try runStoreBackup(["list", "--json"] + to + budget, environment: environment)
        XCTAssertEqual(listed.status, 0, "seed \(seed): \(listed.stderr)")
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
        XCTAssertEqual(Set(rows.compactMap { $0["name"] as? String }), Set(names), "seed \(seed)")
        XCTAssertTrue(rows.allSatisfy { ($0["size"] as? Int ?? 0) > 40 << 20 }, "seed \(seed): \(rows)")
        return names
    }

    /// Deletes the two oldest, prunes to the newest, and checks that only the newest is
    /// left and still verifies.
    private func deleteAndPrune(_ names: [String], to: [String], environment: [String: String], seed: Int) throws {
        for name in names.prefix(2) {
            let deleted = try runStoreBackup(["delete", name, "--yes"] + to + budget, environment: environment)
            XCTAssertEqual(deleted.status, 0, "seed \(seed): \(deleted.stderr)")
        }
        let pruned = try runStoreBackup(["prune", "--keep-last", "1", "--yes"] + to + budget, environment: environment)
        XCTAssertEqual(pruned.status, 0, "seed \(seed): \(pruned.stderr)")
        let listed = try runStoreBackup(["list", "--json"] + to + budget, environment: environment)
        XCTAssertEqual(listed.status, 0, "seed \(seed): \(listed.stderr)")
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
        XCTAssertEqual(rows.compactMap { $0["name"] as? String }, [names[3]], "seed \(seed)")
        let verified = try runStoreBackup(["verify", names[3]] + to + budget, environment: environment)
        XCTAssertEqual(verified.status, 0, "seed \(seed): \(verified.stderr)")
    }

    private func shell(_ command: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
    }
}
