import Foundation
import XCTest

@testable import StoreBackup

/// The scheduler's points while S3 cannot be reached: each one waits in the spool beside the
/// store, and they go out oldest first when S3 answers again; every point restores to the
/// store as it was when it was made.
final class PointSpoolTests: XCTestCase {
    var servers: TestServers!
    var work = ""

    override func setUpWithError() throws {
        servers = try TestServers(label: "spool")
        work = try TestEnvironment.temporaryDirectory("point-spool")
    }

    override func tearDownWithError() throws {
        servers?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    static let balances = "SELECT group_concat(balance) FROM (SELECT balance FROM accounts ORDER BY id)"

    func testPointsWaitInTheSpoolWhileS3IsAwayAndGoOutInOrder() async throws {
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let quick = RetryPolicy(budget: 0.5, requestAttempts: 2, operationAttempts: 1, initialDelay: 0.05, maximumDelay: 0.1)
        let reachable = try backend.make("spool", nil, quick)
        // The same bucket and prefix (so the same chain state), at a port nobody listens on.
        let unreachable = try backend.make("spool", 1, quick)
        let away = Locked(false)
        let points = try PointService(work: work) { away.withLock { $0 } ? unreachable : reachable }
        let (service, job, clock, store) = (points.service, points.job, points.clock, points.job.storesDirectory)
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        defer { app.close() }
        let folder = ChainFolder(storesDirectory: store, destination: reachable.displayName)

        // Each minute one more row changes; the store's tables as of each point are kept.
        var expected: [String: String] = [:]
        func minute(_ number: Int) async throws -> BackupRunOutcome {
            try app.execute("UPDATE accounts SET balance = balance + \(number) WHERE id = 1", operation: "writer")
            clock.withLock { $0 = $0.addingTimeInterval(60) }
            usleep(60_000)  // past the racy window, as a minute would be
            let contents = try StoreFixture.query(store + "/App.sqlite", Self.balances)
            let outcome = try await service.runScheduled(job)
            if let name = outcome.backup?.name ?? folder.peek()?.spooled?.last?.name { expected[name] = contents }
            return outcome
        }
        for number in 0..<2 {
            let outcome = try await minute(number)
            XCTAssertNil(outcome.error)
        }

        away.withLock { $0 = true }
        for number in 2..<5 {
            let outcome = try await minute(number)
            XCTAssertNotNil(outcome.error, "S3 is away: the run fails")
            XCTAssertEqual(folder.peek()?.spooled?.count, number - 1, "the point waits in the spool")
        }
        let spooled = try XCTUnwrap(folder.peek()?.spooled).map(\.name)
        for name in spooled { XCTAssertTrue(FileSystem.fileExists(folder.spoolPath(of: name))) }
        let beforeReturn = try await reachable.sortedBackups().map(\.name)
        XCTAssertEqual(beforeReturn.count, 2, "nothing reached S3 meanwhile")

        // The outage outlasts full-scan-every (1 h), after which the chain's cached names are no
        // longer trusted: the spooled points must still go out first.
        clock.withLock { $0 = $0.addingTimeInterval(3600) }
        away.withLock { $0 = false }
        let back = try await minute(5)
        XCTAssertNil(back.error)
        XCTAssertNil(folder.peek()?.spooled, "the spool is empty")
        for name in spooled { XCTAssertFalse(FileSystem.fileExists(folder.spoolPath(of: name))) }
        let left = (try? FileManager.default.contentsOfDirectory(atPath: folder.spoolFolder)) ?? []
        XCTAssertEqual(left, [], "nothing is left in the spool")
        let listed = try await reachable.sortedBackups().map(\.name)
        XCTAssertEqual(listed.count, 6, "the full, a point, three spooled points, and this minute's")
        let chains = BackupChains(names: listed)
        let newest = try XCTUnwrap(back.backup?.name)
        XCTAssertEqual(chains.chain(of: newest).count, 6, "one chain, the spooled points in it in order")
        XCTAssertEqual(Array(chains.chain(of: newest).dropFirst(2).prefix(3)), spooled)

        // Every point, spooled ones included, restores to the store as it was when it was made.
        let repository = BackupRepository(destination: reachable)
        for name in listed {
            let target = work + "/restored-\(listed.firstIndex(of: name)!)"
            _ = try await StoreHelper(storesDirectory: target, destination: reachable).restore(name)
            XCTAssertEqual(try StoreFixture.query(target + "/App.sqlite", Self.balances), expected[name], name)
        }
        let verified = try await repository.verify(.all)
        XCTAssertTrue(verified.allSatisfy(\.ok), "\(verified.filter { !$0.ok }.map { "\($0.name): \($0.problem ?? "")" })")
    }
}
