import Foundation
import XCTest

@testable import StoreBackup

/// Restore to any minute (issue 52), when things go wrong mid-point: `create --incremental`
/// killed -9 at each step a point passes through, at a local folder and at S3, and S3 going
/// away and coming back. After each: every backup `list` shows verifies through its chain,
/// the next point is made, and the newest point restores the store exactly as it was when
/// that point was made (every table's rows, every other file's bytes).
final class PointCrashTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    /// TMPDIR of every command, so what a kill leaves there can be seen.
    var scratch: String { work + "/tmp" }
    var servers: TestServers?
    /// The app's connection, held open as a running app holds it.
    var app: SQLiteConnection?
    /// The checks and commands these tests share with the levels' kill tests.
    var checks: CrashCheckedStore { CrashCheckedStore(work: work, app: app) }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("point-crash")
        try FileSystem.createDirectories(scratch)
        try StoreFixture.make(at: store, logRows: 200, blobCount: 2)
        app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
    }

    override func tearDownWithError() throws {
        app?.close()
        servers?.stop()
        try? FileSystem.removeTree(work)
    }

    /// Every step of a point, in order. A local folder's publish is a rename: it has no
    /// moment mid-upload.
    static let localSteps = ["create-locked", "snapshots-held", "chain-scanned", "archive-built", "chain-published", "chain-saved"]
    static let remoteSteps = [
        "create-locked", "snapshots-held", "chain-scanned", "archive-built", "uploading", "chain-published", "chain-saved",
    ]
    /// Every point of the test on one chain: none ends it by length, and a point carrying a
    /// large new file stays a point.
    static let chainPolicy = ["--max-chain", "40", "--max-delta-share", "1"]
    /// The steps after which the killed point is published (it must then be listed).
    static let publishedSteps: Set<String> = ["chain-published", "chain-saved"]

    func testKillAtEachStepOfAPointToALocalFolder() throws {
        let backups = work + "/backups"
        let target = Target(to: ["--to", backups], from: ["--from", backups], environment: [:], folder: backups)
        try killAtEachStep(Self.localSteps, target: target)
    }

    func testKillAtEachStepOfAPointToS3() throws {
        let servers = try TestServers(label: "point-crash")
        self.servers = servers
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let target = Target(
            to: try backend.arguments("points", "--to", nil), from: try backend.arguments("points", "--from", nil),
            environment: backend.environment, folder: nil)
        try killAtEachStep(Self.remoteSteps, target: target)
        XCTAssertEqual(try backend.contents("points").unfinished, [], "no unfinished multipart upload is left")
    }

    /// S3 behind the fault proxy goes away three ways: the proxy stopped (connection
    /// refused), every upload cut off, and an upload that lands while its answer is lost.
    /// Each point fails with a non-zero exit and an error naming the destination; nothing
    /// half-made is listed; the first point after it is back holds every change made meanwhile.
    func testPointsWhileS3IsAwayFailAndTheNextHoldsEveryChange() throws {
        let servers = try TestServers(label: "point-away")
        self.servers = servers
        let s3 = try servers.start("s3")
        let backend = ContractBackend.s3(s3, work: work)
        var proxy = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(s3["port"] as! Int)"])
        let port = proxy["port"] as! Int
        // Through the proxy for create, which gives up at once; straight to the server for
        // the checks, which must see what really landed.
        let through = Target(
            to: try backend.arguments("points", "--to", port) + ["--retry-for", "0"], from: try backend.arguments("points", "--from", port),
            environment: backend.environment, folder: nil)
        let direct = Target(
            to: try backend.arguments("points", "--to", nil), from: try backend.arguments("points", "--from", nil),
            environment: backend.environment, folder: nil)

        var step = 0
        let full = try createPoint(through)
        XCTAssertEqual(full.kind, "full")
        step += 1
        try checks.write(step)
        let beforeOutage = try createPoint(through)
        XCTAssertEqual(beforeOutage.kind, "incremental")
        var listed = try checks.verifiedListing(direct, "before the outage")

        // Gone: the proxy stopped, nothing listens on its port.
        stopProxy(proxy)
        for _ in 0..<2 {
            step += 1
            try checks.write(step)
            let failed = try checks.run(["create", store, "--incremental"] + Self.chainPolicy + through.to, through)
            XCTAssertNotEqual(failed.status, 0, "a point made while the server is away")
            print("PointCrashTests: a point while the server is away: \(failed.stderr.split(separator: "\n").last ?? "")")
            XCTAssertTrue(
                failed.stderr.contains("s3://backups/points: cannot reach 127.0.0.1:\(port)"),
                "the error names the destination and where it could not reach: \(failed.stderr)")
            XCTAssertEqual(try checks.verifiedListing(direct, "proxy stopped"), listed, "nothing new is listed")
        }

        // Back on the same port, but every upload is cut off half-way.
        proxy = try restartProxy(proxy, upstream: s3["port"] as! Int, port: port)
        try setPlan(port, [["method": "PUT", "fault": "reset", "phase": "request"]])
        step += 1
        try checks.write(step)
        let cut = try checks.run(["create", store, "--incremental"] + Self.chainPolicy + through.to, through)
        XCTAssertNotEqual(cut.status, 0, "an upload cut off")
        print("PointCrashTests: an upload cut off: \(cut.stderr.split(separator: "\n").last ?? "")")
        XCTAssertTrue(cut.stderr.contains("error: s3://backups/points: "), "the error names the destination: \(cut.stderr)")
        XCTAssertEqual(try checks.verifiedListing(direct, "uploads cut off"), listed, "a cut-off upload is not listed")
        XCTAssertEqual(try backend.contents("points").unfinished, [], "no unfinished multipart upload")

        // The upload lands, its answer is lost: create fails, yet the point is whole.
        try setPlan(port, [["method": "PUT", "fault": "reset", "phase": "before_response"]])
        step += 1
        try checks.write(step)
        let landedExpected = try checks.contents(of: store)
        let lost = try checks.run(["create", store, "--incremental"] + Self.chainPolicy + through.to, through)
        XCTAssertNotEqual(lost.status, 0, "an upload whose answer was lost")
        let afterLost = try checks.verifiedListing(direct, "answer lost")
        let landed = afterLost.subtracting(listed)
        XCTAssertEqual(landed.count, 1, "the upload landed: \(landed)")
        for name in landed {
            XCTAssertEqual(try checks.restoredContents(name, direct), landedExpected, "the point that landed is the store of its time")
            // The failed points before it left the chain as it was: still a point on the last one.
            XCTAssertEqual(
                try checks.listedRow(name, direct)["base"] as? String, beforeOutage.name, "the point that landed continues the chain")
        }
        listed = afterLost

        // Back for good: the first point holds every change made while it was away.
        try setPlan(port, [])
        step += 1
        try checks.write(step)
        let expected = try checks.contents(of: store)
        let back = try createPoint(through)
        XCTAssertEqual(back.kind, "incremental", "the outage costs no full")
        XCTAssertEqual(try checks.restoredContents(back.name, direct), expected, "the first point after the outage")
        let final = try checks.verifiedListing(direct, "after the outage")
        XCTAssertEqual(final, listed.union([back.name]))
        XCTAssertEqual(try backend.contents("points").unfinished, [], "no unfinished multipart upload")
        checks.assertNoLeftovers(direct, "after the outage")
    }

    // MARK: the kill loop

    typealias Target = CrashCheckedStore.Target

    /// A full, then for each step: a change, a point killed there, a check of everything
    /// listed, another change, the next point and its restore.
    private func killAtEachStep(_ steps: [String], target: Target) throws {
        XCTAssertEqual(try createPoint(target).kind, "full")
        var listed = try checks.verifiedListing(target, "the full")
        XCTAssertEqual(listed.count, 1)
        for (index, step) in steps.enumerated() {
            try checks.write(2 * index + 1)
            if step == "uploading" {
                // A point large enough to be cut off part-way: the kill lands mid-body.
                try shell("head -c 4194304 /dev/urandom > '\(store)/.App_SUPPORT/_EXTERNAL_DATA/large'")
            }
            let atKill = try checks.contents(of: store)
            var paused = target.environment
            paused["STOREBACKUP_TEST_PAUSE_AT"] = step
            let create = try BackgroundCommand(
                ["create", store, "--incremental"] + Self.chainPolicy + target.to, environment: checks.environment(paused))
            XCTAssertTrue(create.waitForLine(containing: "test pause at \(step)"), "\(step): never reached; stderr: \(create.stderrSoFar)")
            create.kill9()

            let afterKill = try checks.verifiedListing(target, "killed at \(step)")
            let killedPoint = afterKill.subtracting(listed)
            XCTAssertTrue(afterKill.isSuperset(of: listed), "killed at \(step): a listed backup went away")
            if Self.publishedSteps.contains(step) {
                XCTAssertEqual(killedPoint.count, 1, "killed at \(step), after its publish: the point is listed")
            } else {
                XCTAssertEqual(killedPoint, [], "killed at \(step), before its publish ended: nothing is listed")
            }
            for name in killedPoint {
                XCTAssertEqual(try checks.restoredContents(name, target), atKill, "killed at \(step): the listed point \(name)")
            }

            try checks.write(2 * index + 2)
            let expected = try checks.contents(of: store)
            let next = try createPoint(target)
            XCTAssertEqual(next.kind, "incremental", "the point after a kill at \(step) continues the chain")
            XCTAssertEqual(try checks.restoredContents(next.name, target), expected, "the point after a kill at \(step)")
            listed = try checks.verifiedListing(target, "the point after a kill at \(step)")
            XCTAssertEqual(listed, afterKill.union([next.name]))
            checks.assertNoLeftovers(target, "after the point that followed a kill at \(step)")
        }
    }

    // MARK: helpers

    /// A point that must be made: its name and kind.
    private func createPoint(_ target: Target, file: StaticString = #filePath, line: UInt = #line) throws -> (name: String, kind: String) {
        let result = try checks.run(["create", store, "--incremental", "--json"] + Self.chainPolicy + target.to, target)
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        let summary = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
        return (summary["name"] as? String ?? "", summary["kind"] as? String ?? "")
    }

    // MARK: the proxy

    /// Stops the proxy (its pid, which this test started): its port then refuses connections.
    private func stopProxy(_ proxy: [String: Any]) {
        let pid = pid_t(proxy["pid"] as! Int)
        kill(pid, SIGTERM)
        // Wait for the event: the port refusing connections.
        let deadline = Date().addingTimeInterval(20)
        while portAccepts(proxy["port"] as! Int) {
            guard Date() < deadline else { return XCTFail("the proxy \(pid) still listens") }
            usleep(10_000)
        }
    }

    /// A new proxy on the same port, its pid file where the old one's was (so
    /// ``TestServers/stop()`` ends it).
    private func restartProxy(_ old: [String: Any], upstream: Int, port: Int) throws -> [String: Any] {
        let state = old["state_dir"] as! String
        // Started through Python's subprocess, which closes the descriptors the daemon would
        // otherwise inherit from this process: Foundation learns of its child's exit by one
        // of them closing.
        let launch = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
        let result = try runTool(
            "/usr/bin/env",
            [
                "python3", "-c", launch, "python3", TestEnvironment.packageRoot + "/Tests/Servers/faultproxy.py", "--upstream",
                "127.0.0.1:\(upstream)", "--port", "\(port)", "--daemon", "--pidfile", state + "/faultproxy.pid", "--log",
                state + "/faultproxy.log",
            ])
        XCTAssertEqual(result.status, 0, result.stderr)
        let line = result.stdout.split(separator: "\n").last.map(String.init) ?? ""
        var info = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] ?? [:]
        info["state_dir"] = state
        XCTAssertEqual(info["port"] as? Int, port)
        return info
    }

    /// Puts a new fault plan in force, through the proxy's control endpoint.
    private func setPlan(_ port: Int, _ rules: [[String: Any]]) throws {
        let body = try JSONSerialization.data(withJSONObject: ["seed": 1, "rules": rules])
        let result = try runTool(
            "/usr/bin/curl",
            ["-sSf", "-X", "PUT", "--data-binary", String(decoding: body, as: UTF8.self), "http://127.0.0.1:\(port)/__faultproxy/plan"])
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    private func portAccepts(_ port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
