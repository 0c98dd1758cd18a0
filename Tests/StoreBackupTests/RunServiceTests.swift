import Foundation
import XCTest

@testable import StoreBackup

/// `storebackup run`, `create --store/--prune`, hooks, `status` and `prune`, as real processes
/// against real local folders. Waiting is by polling files against a deadline.
final class RunServiceTests: XCTestCase {
    var work = ""
    var stateDirectory: String { work + "/state" }
    var environment: [String: String] { ["STOREBACKUP_STATE_DIR": stateDirectory, "STOREBACKUP_HOSTNAME": ""] }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("run")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: work)
    }

    func writeConfiguration(_ yaml: String, name: String = "storebackup.yml") throws -> String {
        let path = work + "/" + name
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func files(in folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
    }

    func state(_ store: String) -> BackupState? { BackupStateStore(directory: stateDirectory).load(store) }

    /// Polls `condition` until it holds or `seconds` pass.
    func waitFor(_ what: String, seconds: Double = 120, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            guard Date() < deadline else { throw WaitTimeout(what: what) }
            usleep(20_000)
        }
    }

    func waitForExit(_ process: Process, seconds: Double = 60) throws {
        try waitFor("the process to exit", seconds: seconds) { !process.isRunning }
    }

    /// Starts `storebackup run`, its stderr going to a file (read with `log`).
    func startRun(_ configuration: String) throws -> (Process, logPath: String) {
        let logPath = work + "/run-\(UUID().uuidString.prefix(6)).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestEnvironment.binary)
        process.arguments = ["run", "--config", configuration]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: logPath)
        try process.run()
        return (process, logPath)
    }

    func log(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    func makeStore(_ name: String = "Stores") throws -> String {
        let path = work + "/" + name
        try StoreFixture.make(at: path, logRows: 100, blobCount: 2)
        return path
    }

    // MARK: run

    /// Acceptance 1 and retention: one backup per firing, keep-last applied after each,
    /// then SIGTERM gives a clean exit with no temporary file anywhere.
    func testRunBacksUpOnScheduleAppliesRetentionAndStopsCleanly() throws {
        let store = try makeStore()
        let backups = work + "/backups"
        let configuration = try writeConfiguration(
            """
            stores:
              - name: app
                path: \(store)
                destination: \(backups)
                schedule: every 2s
                retention: {keep-last: 2}
            """)
        let (process, logPath) = try startRun(configuration)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        var seen: [String] = []
        try waitFor("three scheduled backups") {
            if let name = state("app")?.lastSuccess?.backup, seen.last != name {
                seen.append(name)
                // When a success is recorded, retention has already run for it.
                if seen.count >= 3 {
                    XCTAssertFalse(
                        FileManager.default.fileExists(atPath: backups + "/" + seen[seen.count - 3]),
                        "keep-last 2 deletes the third newest")
                    XCTAssertTrue(FileManager.default.fileExists(atPath: backups + "/" + name))
                }
            }
            return seen.count >= 3
        }
        XCTAssertEqual(Set(seen).count, seen.count, "each firing makes its own backup")
        XCTAssertLessThanOrEqual(files(in: backups).filter(BackupName.isBackup).count, 3)

        kill(process.processIdentifier, SIGTERM)
        try waitForExit(process)
        XCTAssertEqual(process.terminationReason, .exit)
        XCTAssertEqual(process.terminationStatus, 0, log(logPath))
        XCTAssertTrue(log(logPath).contains("scheduler stopped"), log(logPath))
        XCTAssertEqual(files(in: backups).filter { $0.hasPrefix(".") }, [], "no temporary files")
        XCTAssertEqual(files(in: stateDirectory).filter { $0.hasPrefix(".") }, [])
        XCTAssertFalse(log(logPath).contains("skipping"), "no overlapping runs")

        // Exactly one backup per firing: every run the scheduler started created one
        // backup (but a last one SIGTERM may have cut short), each under its own name.
        let text = log(logPath)
        let started = text.components(separatedBy: "backup started").count - 1
        let created = text.components(separatedBy: "backup created").count - 1
        XCTAssertGreaterThanOrEqual(created, 3, text)
        XCTAssertTrue(started == created || started == created + 1, "\(started) runs started, \(created) backups created")
        let createdLines = text.split(separator: "\n").filter { $0.contains("backup created") }
        for name in seen { XCTAssertEqual(createdLines.filter { $0.contains(name) }.count, 1, "\(name) created once") }
    }

    /// Acceptance 1, second half: SIGTERM while an archive is being written cancels it, the
    /// service exits cleanly, and nothing (partial or temporary) is left in the destination.
    func testSigtermDuringABackupLeavesNothingPartial() throws {
        let store = try makeStore()
        // Enough compressible data at the best level to take a while on any machine.
        let big = FileHandle(
            forWritingAtPath: {
                FileManager.default.createFile(atPath: store + "/big.log", contents: nil); return store + "/big.log"
            }())!
        for block in 0..<1024 {
            var chunk = ""
            for line in 0..<800 { chunk += "block \(block) line \(line) \(block &* 7919 &+ line &* 104_729)\n" }
            big.write(Data(chunk.utf8))
        }
        try big.close()
        let backups = work + "/backups"
        let configuration = try writeConfiguration(
            """
            stores:
              - name: big
                path: \(store)
                destination: \(backups)
                schedule: every 1s
                level: best
            """)
        let (process, logPath) = try startRun(configuration)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        try waitFor("the archive being written") { files(in: backups).contains { $0.hasPrefix(".storebackup-tmp-") } }
        kill(process.processIdentifier, SIGTERM)
        try waitForExit(process)
        XCTAssertEqual(process.terminationStatus, 0, log(logPath))
        XCTAssertEqual(files(in: backups), [], "neither a backup nor a temporary file")
        let recorded = try XCTUnwrap(state("big"))
        XCTAssertNil(recorded.lastSuccess)
        XCTAssertTrue(recorded.lastFailure?.error.contains("cancelled") ?? false, "\(String(describing: recorded.lastFailure))")
    }

    /// Acceptance 4: the state says the last success was days ago, so the missed daily run
    /// happens at start-up, once.
    func testMissedRunIsCaughtUpAtStartup() throws {
        let store = try makeStore()
        let backups = work + "/backups"
        // A daily time 12 hours away: only the catch-up can make a backup during this test.
        let later = Calendar.current.dateComponents([.hour, .minute], from: Date().addingTimeInterval(12 * 3600))
        let configuration = try writeConfiguration(
            """
            stores:
              - name: app
                path: \(store)
                destination: \(backups)
                schedule: daily \(String(format: "%02d:%02d", later.hour!, later.minute!))
            """)
        var old = BackupState(store: "app", storesDirectory: store)
        old.lastSuccess = BackupState.Success(
            at: Date().addingTimeInterval(-3 * 86_400), backup: "2020-01-01 000000 Stores.zip",
            size: 1, durationSeconds: 1)
        try BackupStateStore(directory: stateDirectory).save(old)

        let (process, logPath) = try startRun(configuration)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        try waitFor("the catch-up backup") { state("app")?.lastSuccess?.backup != old.lastSuccess?.backup }
        try waitFor("the next run to be planned") { (state("app")?.nextRun ?? .distantPast) > Date() }
        XCTAssertEqual(files(in: backups).filter(BackupName.isBackup), [state("app")!.lastSuccess!.backup], "exactly one run")
        XCTAssertTrue(log(logPath).contains("missed"), log(logPath))
        kill(process.processIdentifier, SIGTERM)
        try waitForExit(process)
        XCTAssertEqual(process.terminationStatus, 0, log(logPath))
    }

    // MARK: create --store, hooks and status

    /// Acceptance 3 and hooks: a success then a forced failure (an unreachable WebDAV
    /// server: nothing listens on its port; retries cut short through the environment) are both in `status --json`;
    /// the on-success command ran, the on-failure POST arrived, and a failing hook changes nothing.
    func testHooksStatusAndAForcedFailure() throws {
        let store = try makeStore()
        let listener = try PostListener(folder: work)
        defer { listener.stop() }
        let marker = work + "/success-marker"
        func configuration(destination: String) throws -> String {
            try writeConfiguration(
                """
                schedule: daily 03:00
                stores:
                  - name: app
                    path: \(store)
                    destination: \(destination)
                    retention: {keep-last: 5}
                hooks:
                  on-success:
                    - {command: "printf '%s' \\"$STOREBACKUP_BACKUP\\" > \(marker)"}
                    - {command: "exit 3"}
                  on-failure: {url: "http://127.0.0.1:\(listener.port)/alert", timeout: 20s}
                """)
        }
        let good = try runStoreBackup(
            ["create", "--config", try configuration(destination: work + "/backups"), "--store", "app", "--prune"],
            environment: environment)
        XCTAssertEqual(good.status, 0, "a failing hook does not fail the backup: \(good.stderr)")
        let name = good.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/backups/" + name))
        XCTAssertEqual(try String(contentsOfFile: marker, encoding: .utf8), name)
        XCTAssertTrue(good.stderr.contains("hook failed"), good.stderr)
        XCTAssertNil(listener.received, "no failure, no POST")

        let closedPort = try WebDAVDestinationTests.unusedPort()
        let unreachable = "webdav://127.0.0.1:\(closedPort)/backups"
        let fastRetries = environment.merging(["STOREBACKUP_RETRY_ATTEMPTS": "2", "STOREBACKUP_RETRY_OPERATIONS": "1"]) { _, new in new }
        let bad = try runStoreBackup(
            ["create", "--config", try configuration(destination: unreachable), "--store", "app"],
            environment: fastRetries)
        XCTAssertEqual(bad.status, 1, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("storebackup: error:"), bad.stderr)
        try waitFor("the failure POST", seconds: 30) { listener.received != nil }
        let posted = try XCTUnwrap(JSONSerialization.jsonObject(with: listener.received!) as? [String: Any])
        XCTAssertEqual(posted["event"] as? String, "failure")
        XCTAssertEqual(posted["store"] as? String, "app")
        XCTAssertFalse((posted["error"] as? String ?? "").isEmpty)

        let status = try runStoreBackup(
            ["status", "--json", "--config", try configuration(destination: work + "/backups")], environment: environment)
        XCTAssertEqual(status.status, 0, status.stderr)
        let rows = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(rows.count, 1)
        let success = try XCTUnwrap(rows[0]["lastSuccess"] as? [String: Any], status.stdout)
        XCTAssertEqual(success["backup"] as? String, name)
        XCTAssertGreaterThan(success["size"] as? Int ?? 0, 0)
        XCTAssertNotNil(success["ageSeconds"] as? Int)
        let failure = try XCTUnwrap(rows[0]["lastFailure"] as? [String: Any], status.stdout)
        XCTAssertTrue((failure["error"] as? String ?? "").contains("cannot reach 127.0.0.1:\(closedPort)"), status.stdout)
        XCTAssertEqual(rows[0]["schedule"] as? String, "daily 03:00")
        XCTAssertNotNil(rows[0]["nextRun"] as? String)
        XCTAssertEqual(rows[0]["store"] as? String, "app")
    }

    // MARK: prune and list --host

    func testPruneExplainsItselfAndSparesOtherHosts() throws {
        let store = try makeStore()
        let backups = work + "/backups"
        let mine = try runStoreBackup(["create", store, "--to", backups], environment: environment)
        XCTAssertEqual(mine.status, 0, mine.stderr)
        var other = environment
        other["STOREBACKUP_HOSTNAME"] = "other-host"
        let theirs = try runStoreBackup(["create", store, "--to", backups], environment: other)
        XCTAssertEqual(theirs.status, 0, theirs.stderr)
        for day in 1...2 {
            for (source, offset) in [(mine.stdout, 0.0), (theirs.stdout, 30.0)] {
                let name = BackupName.make(for: Date(timeIntervalSinceNow: -Double(day) * 86_400 - offset))
                try FileManager.default.copyItem(
                    atPath: backups + "/" + source.trimmingCharacters(in: .whitespacesAndNewlines),
                    toPath: backups + "/" + name)
            }
        }
        let dryRun = try runStoreBackup(["prune", "--to", backups, "--keep-last", "1", "--dry-run"], environment: environment)
        XCTAssertEqual(dryRun.status, 0, dryRun.stderr)
        XCTAssertEqual(dryRun.stdout.components(separatedBy: "(last snapshot)").count - 1, 1, dryRun.stdout)
        XCTAssertEqual(dryRun.stdout.components(separatedBy: "  delete  ").count - 1, 2, dryRun.stdout)
        XCTAssertEqual(files(in: backups).filter(BackupName.isBackup).count, 6, "a dry run deletes nothing")

        let refused = try runStoreBackup(["prune", "--to", backups, "--keep-last", "1"], environment: environment)
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("--yes"), refused.stderr)

        let pruned = try runStoreBackup(["prune", "--to", backups, "--keep-last", "1", "--yes"], environment: environment)
        XCTAssertEqual(pruned.status, 0, pruned.stderr)
        XCTAssertEqual(
            files(in: backups).filter(BackupName.isBackup).count, 4, "this host's two older ones went; the other host's three stay")

        let listed = try runStoreBackup(["list", "--to", backups, "--json", "--host", "other-host"], environment: environment)
        let rows = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(rows.count, 3)
        XCTAssertTrue(rows.allSatisfy { $0["host"] as? String == "other-host" })
        let plain = try runStoreBackup(["list", "--to", backups], environment: environment)
        XCTAssertTrue(plain.stdout.contains("other-host"), plain.stdout)

        let noPolicy = try runStoreBackup(["prune", "--to", backups, "--config", work + "/missing.yml"], environment: environment)
        XCTAssertEqual(noPolicy.status, 1)
        XCTAssertTrue(noPolicy.stderr.contains("missing.yml"), noPolicy.stderr)
    }
}

/// A tiny HTTP server (Python's standard library) that stores the body of the first POST.
final class PostListener {
    let process = Process()
    let port: Int
    let bodyPath: String

    init(folder: String) throws {
        bodyPath = folder + "/posted-\(UUID().uuidString.prefix(6)).json"
        let script = """
            import http.server, os, sys
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    with open(sys.argv[1] + ".tmp", "wb") as f:
                        f.write(body)
                    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                def log_message(self, *args):
                    pass
            server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
            print(server.server_address[1], flush=True)
            server.serve_forever()
            """
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script, bodyPath]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw WaitTimeout(what: "the Python HTTP listener to start")
        }
        self.port = port
    }

    var received: Data? { FileManager.default.contents(atPath: bodyPath) }

    func stop() {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }
}

/// A deadline passed while waiting (a test failure, with what was awaited).
struct WaitTimeout: Error, CustomStringConvertible {
    var what: String
    var description: String { "gave up waiting for \(what)" }
}
