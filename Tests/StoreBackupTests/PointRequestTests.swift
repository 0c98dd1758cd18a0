import Foundation
import Logging
import XCTest

@testable import StoreBackup

/// What a point costs on the wire: the scheduler's points to S3 (rclone) through the fault
/// proxy, which logs every HTTP request and the bytes each carried.
final class PointRequestTests: XCTestCase {
    var servers: TestServers!
    var work = ""

    override func setUpWithError() throws {
        servers = try TestServers(label: "points")
        work = try TestEnvironment.temporaryDirectory("point-requests")
    }

    override func tearDownWithError() throws {
        servers?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    func testAPointOnS3IsItsUploadAndOneReadOfItself() async throws {
        let s3 = try servers.start("s3")
        let info = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(s3["port"] as! Int)"])
        let proxy = WireProxy(port: info["port"] as! Int, logFile: info["log"] as! String)
        let destination = try ContractBackend.s3(s3, work: work).make("points", proxy.port, RetryPolicy())
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let start = Date(timeIntervalSince1970: 1_796_464_800)
        let clock = Locked(start)
        var job = StoreJob(name: "app", storesDirectory: store, destination: "s3", schedule: try Schedule.parse("every 1m"))
        job.incremental = IncrementalPolicy()
        let service = BackupService(
            jobs: [job], stateStore: BackupStateStore(directory: work + "/state"), destinationOptions: DestinationOptions(),
            logger: Logger(label: "points"), proofKeyFile: work + "/proof.key", now: { clock.withLock { $0 } },
            resolveDestination: { _, _ in destination }, racyWindowNanoseconds: 50_000_000)
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        defer { app.close() }

        var seen = 0
        func requestsSinceLast() -> [[String: Any]] {
            usleep(300_000)  // the proxy logs a request once it has relayed it
            let all = proxy.entries()
            defer { seen = all.count }
            return Array(all.dropFirst(seen))
        }
        var steady: [(requests: [String], down: Int, up: Int)] = []
        for minute in 0..<8 {
            if minute < 5 {
                try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = \(minute + 1)", operation: "writer")
                usleep(60_000)
            }
            clock.withLock { $0 = start.addingTimeInterval(Double(minute * 60 + 59)) }
            let outcome = try await service.runScheduled(job)
            XCTAssertNil(outcome.error, "minute \(minute)")
            let requests = requestsSinceLast()
            let lines = requests.compactMap { ($0["request"] as? String)?.split(separator: " ").prefix(1).joined() }
            let down = requests.reduce(0) { $0 + (($1["down_bytes"] as? Int) ?? 0) }
            let up = requests.reduce(0) { $0 + (($1["up_bytes"] as? Int) ?? 0) }
            print("minute \(minute): \(outcome.backup?.kind ?? "no point"): \(lines) up \(up) down \(down)")
            if minute >= 2, minute < 5 { steady.append((lines, down, up)) }
            if minute >= 6 {
                XCTAssertNil(outcome.backup, "idle")
                XCTAssertEqual(lines, [], "an idle run asks nothing")
            }
        }
        for point in steady {
            XCTAssertLessThanOrEqual(point.requests.count, 3, "\(point.requests)")
            XCTAssertEqual(point.requests.filter { $0 == "GET" }.count, 1, "the read-back of the point, no listing")
            XCTAssertLessThanOrEqual(point.down, point.up + 1024, "nothing of the chain is downloaded")
        }
    }
}
