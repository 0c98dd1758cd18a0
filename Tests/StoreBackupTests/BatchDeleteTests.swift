import Foundation
import XCTest

@testable import StoreBackup

/// Retention on S3 deletes expired backups in one DeleteObjects request per 1,000 instead of
/// a `HEAD` and a `DELETE` each (at a point a minute, expired points are most of a day's
/// requests), and never a base that a kept backup needs. Against rclone's S3 server through
/// the fault proxy, which logs every request.
final class BatchDeleteTests: XCTestCase {
    var servers: TestServers!
    var work = ""

    override func setUpWithError() throws {
        servers = try TestServers(label: "batch-delete")
        work = try TestEnvironment.temporaryDirectory("batch-delete")
    }

    override func tearDownWithError() throws {
        servers?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    /// Two chains: the first one's six points all expire (deleted in one request), the second
    /// one's two oldest points expire but its newest stays, so they stay as its bases.
    func testRetentionDeletesExpiredPointsInOneRequestAndKeepsBasesOfKeptOnes() async throws {
        let s3 = try servers.start("s3")
        let info = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(s3["port"] as! Int)"])
        let proxy = ContractProxy(port: info["port"] as! Int, logFile: info["log"] as! String)
        let destination = try ContractBackend.s3(s3, work: work).make("batch", proxy.port, RetryPolicy())

        let first = "2026-12-01 100000 Stores.zip", second = "2026-12-02 100000 Stores.zip"
        func point(_ minute: Int, on base: String, day: Int) -> String {
            "2026-12-0\(day) 10\(String(format: "%02d", minute))00 incremental on \(base.prefix(17)) Stores.zip"
        }
        var firstPoints: [String] = []
        for minute in 1...6 { firstPoints.append(point(minute, on: firstPoints.last ?? first, day: 1)) }
        var secondPoints: [String] = []
        for minute in 1...3 { secondPoints.append(point(minute, on: secondPoints.last ?? second, day: 2)) }
        let all = [first] + firstPoints + [second] + secondPoints
        for name in all {
            let file = work + "/upload"
            try Data(name.utf8).write(to: URL(fileURLWithPath: file))
            try await destination.upload(file: file, as: name, progress: nil)
        }
        let listed = try await destination.listBackups()
        let byName = Dictionary(uniqueKeysWithValues: listed.map { ($0.name, $0) })
        let doomed = Set(firstPoints + secondPoints.prefix(2))
        let decisions = BackupChains.newestFirst(listed).map { backup in
            RetentionPolicy.Decision(backup: backup, reasons: doomed.contains(backup.name) ? [] : ["kept"])
        }
        XCTAssertEqual(byName.count, all.count)

        let before = proxy.entries().count
        let keptAsBase = Locked<[String: String]>([:])
        let repository = BackupRepository(destination: destination)
        let deleted = try await repository.prune(
            [RetentionGroup(origin: nil, decisions: decisions)],
            keptAsBase: { name, dependent in keptAsBase.withLock { $0[name] = dependent } })

        XCTAssertEqual(Set(deleted), Set(firstPoints))
        XCTAssertEqual(keptAsBase.withLock { $0 }, [secondPoints[1]: secondPoints[2], secondPoints[0]: secondPoints[1]])
        let remaining = Set(try await destination.listBackups().map(\.name))
        XCTAssertEqual(remaining, Set([first, second] + secondPoints))
        // The listing above is the last request: everything between is the prune's.
        let requests = proxy.entries(until: { $0.count >= before + 3 }).dropFirst(before).compactMap { $0["request"] as? String }
        let methods = requests.map { String($0.split(separator: " ").first ?? "") }
        XCTAssertEqual(methods, ["GET", "POST", "GET"], "\(requests)")
        XCTAssertTrue(requests[0].contains("versioning"), requests[0])
        XCTAssertTrue(requests[1].contains("delete"), requests[1])
    }

    /// The request body escapes what XML needs, and an answer's per-key errors are read back
    /// without the prefix; an `Error` answer with status 200 fails the whole request.
    func testDeleteObjectsBodyAndAnswer() throws {
        let body = S3Destination.deleteRequestBody(keys: ["app/a & b <c> Stores.zip"])
        XCTAssertTrue(body.contains("<Key>app/a &amp; b &lt;c&gt; Stores.zip</Key>"), body)
        XCTAssertTrue(body.contains("<Quiet>true</Quiet>"), body)
        let answer = """
            <?xml version="1.0" encoding="UTF-8"?>
            <DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Error><Key>app/x &amp; y Stores.zip</Key><Code>InternalError</Code><Message>try again</Message></Error>
            </DeleteResult>
            """
        let failed = try S3Destination.failedKeys(inDeleteResult: Data(answer.utf8))
        XCTAssertEqual(failed.map(\.key), ["app/x & y Stores.zip"])
        XCTAssertEqual(failed.map(\.answer), ["InternalError: try again"])
        let refused = "<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
        XCTAssertThrowsError(try S3Destination.failedKeys(inDeleteResult: Data(refused.utf8)))
    }
}
