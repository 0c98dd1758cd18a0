import Foundation
import Logging
import XCTest

@testable import StoreBackup

/// Restore drills (`verify: {schedule, pick}`, `verify --store`) and the check after create
/// (`verify-after-create`), with real stores, real local folders and the real binary: what
/// they record in the state file, the metrics file and the hooks.
final class VerifyDrillTests: XCTestCase {
    var work = ""
    var stateDirectory: String { work + "/state" }
    var metricsFile: String { work + "/storebackup.prom" }
    var hookMarker: String { work + "/hook.txt" }
    var backups: String { work + "/backups" }
    var environment: [String: String] { ["STOREBACKUP_STATE_DIR": stateDirectory, "STOREBACKUP_HOSTNAME": ""] }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("drill")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// A configuration with one store `app` backed up to `backups`, its failure hook writing
    /// the event, task, backup and error to `hookMarker`.
    func writeConfiguration(store: String, extra: String = "") throws -> String {
        let path = work + "/storebackup.yml"
        try """
        state-directory: \(stateDirectory)
        metrics: {file: \(metricsFile)}
        schedule: daily 02:30
        stores:
          - name: app
            path: \(store)
            destination: \(backups)
            verify: {schedule: "30 4 * * *", pick: newest}
            retention: {keep-last: 1}
            hooks:
              on-failure: {command: "printf '%s|%s|%s|%s' \\"$STOREBACKUP_EVENT\\" \\"$STOREBACKUP_TASK\\" \\"$STOREBACKUP_BACKUP\\" \\"$STOREBACKUP_ERROR\\" > \(hookMarker)"}
        \(extra)
        """.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func metricLines(_ name: String) -> [String] {
        let text = (try? String(contentsOfFile: metricsFile, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter { $0.hasPrefix(name + "{") }
    }

    func statusRow(_ configuration: String) throws -> [String: Any] {
        let status = try runStoreBackup(["status", "--json", "--config", configuration], environment: environment)
        XCTAssertEqual(status.status, 0, status.stderr)
        return try XCTUnwrap((JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [[String: Any]])?.first, status.stdout)
    }

    func createConfigured(_ configuration: String) throws -> String {
        let created = try runStoreBackup(["create", "--config", configuration, "--store", "app"], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        return created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A drill that passes: the success timestamp metric is set to the drill's time, status
    /// names the backup it verified, and no failure hook runs.
    func testDrillSuccessSetsTimestampMetricAndStatus() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 2)
        let configuration = try writeConfiguration(store: store)
        let name = try createConfigured(configuration)
        let before = Date().timeIntervalSince1970.rounded(.down)

        let drill = try runStoreBackup(["verify", "--store", "app", "--config", configuration], environment: environment)
        XCTAssertEqual(drill.status, 0, drill.stderr)
        XCTAssertTrue(drill.stdout.hasPrefix("ok      \(name)"), drill.stdout)

        let stamps = metricLines(BackupMetrics.lastVerifySuccess)
        XCTAssertEqual(stamps.count, 1, "\(stamps)")
        let stamp = try XCTUnwrap(stamps.first.flatMap { Double($0.split(separator: " ").last!) })
        XCTAssertGreaterThanOrEqual(stamp, before)
        XCTAssertTrue(stamps[0].contains("store=\"app\""), stamps[0])
        XCTAssertTrue(
            metricLines(BackupMetrics.verifies).contains { $0.contains("trigger=\"drill\"") && $0.contains("outcome=\"success\"") })
        XCTAssertTrue(metricLines(BackupMetrics.verifyFailures).isEmpty)

        let row = try statusRow(configuration)
        let verified = try XCTUnwrap(row["lastVerifySuccess"] as? [String: Any], "\(row)")
        XCTAssertEqual(verified["backups"] as? [String], [name])
        XCTAssertEqual(verified["trigger"] as? String, "drill")
        XCTAssertEqual(row["verifyFailing"] as? Bool, false)
        XCTAssertNotNil(row["nextVerify"] as? String, "the drill's schedule is shown: \(row)")
        let text = try runStoreBackup(["status", "--config", configuration], environment: environment)
        XCTAssertTrue(text.stdout.contains("last verify") && text.stdout.contains(name), text.stdout)
        XCTAssertFalse(text.stdout.contains("VERIFY FAILED"), text.stdout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: hookMarker), "no failure, no hook")

        // A drill picks its own backups and destinations.
        for extra in [["latest"], ["--all"], ["--from", backups]] {
            let refused = try runStoreBackup(["verify", "--store", "app", "--config", configuration] + extra, environment: environment)
            XCTAssertEqual(refused.status, 64, "\(extra): \(refused.stderr)")
        }
    }

    /// A byte of the archive changed in the destination: the drill fails (exit status 1),
    /// raises the failure counter for that backup, runs the failure hook with task=verify,
    /// and status marks the store failed.
    func testDrillThatFindsADamagedBackupRaisesTheFailureMetricAndRunsTheHook() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 2)
        let configuration = try writeConfiguration(store: store)
        let name = try createConfigured(configuration)
        XCTAssertTrue(
            metricLines(BackupMetrics.verifies).contains { $0.contains("trigger=\"after-create\"") && $0.contains("outcome=\"success\"") },
            "the backup was checked after create")

        // One byte in the middle of the archive (inside the entries' data) is flipped.
        let archive = backups + "/" + name
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: archive))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size / 2)
        let byte = try XCTUnwrap(handle.readData(ofLength: 1).first)
        try handle.seek(toOffset: size / 2)
        handle.write(Data([byte ^ 0x5a]))
        try handle.close()

        let drill = try runStoreBackup(["verify", "--store", "app", "--config", configuration], environment: environment)
        XCTAssertEqual(drill.status, 1, drill.stdout + drill.stderr)
        XCTAssertTrue(drill.stdout.hasPrefix("FAILED  \(name)"), drill.stdout)

        let failures = metricLines(BackupMetrics.verifyFailures)
        XCTAssertEqual(failures.count, 1, "\(failures)")
        XCTAssertTrue(
            failures[0].contains("backup=\"\(name)\"") && failures[0].contains("store=\"app\"") && failures[0].hasSuffix(" 1"), failures[0])
        XCTAssertEqual(metricLines(BackupMetrics.lastVerifyFailure).count, 1)

        let event = try String(contentsOfFile: hookMarker, encoding: .utf8).split(separator: "|", maxSplits: 3).map(String.init)
        XCTAssertEqual(Array(event.prefix(3)), ["failure", "verify", name])
        XCTAssertTrue(event.last?.contains("restore drill") == true && event.last?.contains(name) == true, "\(event)")

        let row = try statusRow(configuration)
        XCTAssertEqual(row["verifyFailing"] as? Bool, true, "\(row)")
        let failed = try XCTUnwrap(row["lastVerifyFailure"] as? [String: Any], "\(row)")
        XCTAssertEqual(failed["backups"] as? [String], [name])
        XCTAssertTrue((row["lastFailure"] as? [String: Any])?["error"].map { "\($0)" }?.contains("restore drill") == true, "\(row)")
        let text = try runStoreBackup(["status", "--config", configuration], environment: environment)
        XCTAssertTrue(text.stdout.contains("VERIFY FAILED"), text.stdout)

        // A second failing drill counts again: the counter is carried across processes.
        XCTAssertEqual(try runStoreBackup(["verify", "--store", "app", "--config", configuration], environment: environment).status, 1)
        XCTAssertTrue(
            metricLines(BackupMetrics.verifyFailures).first?.hasSuffix(" 2") == true, "\(metricLines(BackupMetrics.verifyFailures))")
    }

    /// A database already damaged in the live store: `create --store` (verify-after-create,
    /// on by default) exits non-zero naming the database and saying where the damage was,
    /// runs the failure hook, counts the failure in the metrics, and records no success; with
    /// `verify-after-create: false` the same create passes silently, which is why it is on.
    func testVerifyAfterCreateReportsADatabaseDamagedInTheLiveStore() throws {
        let store = work + "/Corrupt"
        try StoreFixture.makeWithCorruptDatabase(at: store)
        let configuration = try writeConfiguration(store: store)

        let created = try runStoreBackup(["create", "--config", configuration, "--store", "app"], environment: environment)
        XCTAssertEqual(created.status, 1, created.stdout + created.stderr)
        XCTAssertTrue(
            created.stderr.contains("Data.sqlite") && created.stderr.contains("already damaged in the live store"), created.stderr)
        let name = try XCTUnwrap((try FileManager.default.contentsOfDirectory(atPath: backups)).first { $0.hasSuffix("Stores.zip") })
        XCTAssertTrue(created.stderr.contains(name), created.stderr)

        let event = try String(contentsOfFile: hookMarker, encoding: .utf8)
        XCTAssertTrue(event.hasPrefix("failure||"), "a backup run's hook (no task): \(event)")
        XCTAssertTrue(event.contains("already damaged in the live store"), event)
        let failures = metricLines(BackupMetrics.verifyFailures)
        XCTAssertEqual(failures.count, 1, "\(failures)")
        XCTAssertTrue(failures[0].contains("backup=\"\(name)\""), failures[0])
        XCTAssertTrue(
            metricLines(BackupMetrics.verifies).contains { $0.contains("trigger=\"after-create\"") && $0.contains("outcome=\"failure\"") })

        let row = try statusRow(configuration)
        XCTAssertTrue(row["lastSuccess"] is NSNull, "a damaged backup is not a success: \(row)")
        XCTAssertEqual(row["verifyFailing"] as? Bool, true)
        XCTAssertTrue(((row["lastFailure"] as? [String: Any])?["error"] as? String)?.contains("already damaged") == true, "\(row)")

        // Without the check, create reports success: the silent good backup issue 32 is about.
        try FileManager.default.removeItem(atPath: hookMarker)
        let unchecked = try writeConfiguration(store: store, extra: "verify-after-create: false")
        let silent = try runStoreBackup(["create", "--config", unchecked, "--store", "app"], environment: environment)
        XCTAssertEqual(silent.status, 0, silent.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: hookMarker))
    }

    /// `storebackup run` runs drills on their own schedule (here every second, beside a daily
    /// backup schedule): the state shows a drill's success and its next time, and a clean
    /// stop clears the plan. Waiting is by polling the state file against a deadline.
    func testRunMakesDrillsOnTheirOwnSchedule() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let configuration = try writeConfiguration(store: store)
        let name = try createConfigured(configuration)
        let scheduled = configuration + ".every-second.yml"
        try String(contentsOfFile: configuration, encoding: .utf8)
            .replacingOccurrences(
                of: "verify: {schedule: \"30 4 * * *\", pick: newest}", with: "verify: {schedule: every 1s, pick: rotate}"
            )
            .write(toFile: scheduled, atomically: true, encoding: .utf8)
        let logPath = work + "/run.log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestEnvironment.binary)
        process.arguments = ["run", "--config", scheduled]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: logPath)
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        let states = BackupStateStore(directory: stateDirectory)
        let deadline = Date().addingTimeInterval(120)
        while states.load("app")?.lastVerifySuccess?.trigger != "drill" || states.load("app")?.nextVerify == nil {
            guard Date() < deadline, process.isRunning else {
                return XCTFail("no drill recorded: \(try String(contentsOfFile: logPath, encoding: .utf8))")
            }
            usleep(20_000)
        }
        XCTAssertEqual(states.load("app")?.lastVerifySuccess?.backups, [name])
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        let log = try String(contentsOfFile: logPath, encoding: .utf8)
        XCTAssertTrue(log.contains("restore drill (rotate): verifying \(name)"), log)
        XCTAssertNil(states.load("app")?.nextVerify, "a stopped service plans no drill")
        XCTAssertEqual(states.load("app")?.lastSuccess?.backup, name, "no backup ran: the backup schedule is daily")
    }

    /// `pick: rotate` walks through the backups one night at a time, oldest first, and comes
    /// round again; the drill's date is given, so no clock is waited for.
    func testRotationPicksADifferentBackupEachNightDeterministically() async throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        var names: [String] = []
        for run in 0..<3 {
            let database = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
            try database.execute("CREATE TABLE night\(run)(x)", operation: "test change")
            database.close()
            names.append(
                try await StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups)).createBackup().name)
        }
        XCTAssertEqual(Set(names).count, 3)
        var job = StoreJob(name: "app", storesDirectory: store, destination: backups, schedule: .daily(hour: 2, minute: 30))
        job.verify = VerifyDrill(schedule: .daily(hour: 4, minute: 30), pick: .rotate)
        let service = BackupService(jobs: [job], stateStore: BackupStateStore(directory: stateDirectory), logger: Logger(label: "test"))

        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        let firstNight = calendar.date(from: DateComponents(year: 2026, month: 3, day: 1, hour: 4, minute: 30))!
        var picked: [String] = []
        for night in 0..<4 {
            let date = calendar.date(byAdding: .day, value: night, to: firstNight)!
            let outcome = try await service.verifyNow("app", at: date)
            XCTAssertTrue(outcome.succeeded, "\(outcome.results)")
            XCTAssertEqual(outcome.results.count, 1)
            picked.append(outcome.results[0].name)
        }
        XCTAssertEqual(Set(picked.prefix(3)), Set(names), "three nights verify each of the three backups once: \(picked)")
        XCTAssertEqual(picked[3], picked[0], "the fourth night starts the round again")
        // The same night gives the same backup.
        let again = try await service.verifyNow("app", at: firstNight.addingTimeInterval(3600))
        XCTAssertEqual(again.results.map(\.name), [picked[0]])
        XCTAssertEqual(BackupStateStore(directory: stateDirectory).load("app")?.lastVerifySuccess?.backups, [picked[0]])
    }

    /// The newest backup is an incremental: the drill verifies it through its chain (it
    /// passes), and once a byte of its base (the full) is flipped at the destination, the
    /// drill fails naming the incremental, though its own archive is intact.
    func testDrillVerifiesAnIncrementalThroughItsChain() async throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let chained = ChainedHelper(
            StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups)),
            policy: IncrementalPolicy(maxDeltaShare: 1))
        let full = try await chained.createBackup()
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute("INSERT INTO log(note) VALUES('after the full')", operation: "test change")
        app.close()
        let incremental = try await chained.createBackup()
        XCTAssertEqual(incremental.base, full.name, "the newest backup is an incremental on the full")

        var job = StoreJob(name: "app", storesDirectory: store, destination: backups, schedule: .daily(hour: 2, minute: 30))
        job.verify = VerifyDrill(schedule: .daily(hour: 4, minute: 30), pick: .newest)
        let states = BackupStateStore(directory: stateDirectory)
        let service = BackupService(jobs: [job], stateStore: states, logger: Logger(label: "test"))
        let passed = try await service.verifyNow("app")
        XCTAssertTrue(passed.succeeded, "\(passed.results)")
        XCTAssertEqual(passed.results.map(\.name), [incremental.name])

        var bytes = try Data(contentsOf: URL(fileURLWithPath: backups + "/" + full.name))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: backups + "/" + full.name))
        let failed = try await service.verifyNow("app")
        XCTAssertFalse(failed.succeeded)
        XCTAssertEqual(failed.failures.map(\.result.name), [incremental.name])
        let problem = failed.failures.first?.result.problem ?? ""
        XCTAssertTrue(problem.contains("\"\(full.name)\" is damaged"), problem)
        XCTAssertEqual(states.load("app")?.lastVerifyFailure?.backups, [incremental.name])
    }

    /// Two stores sharing one folder: a store's drill verifies its own newest backup, not the
    /// other store's newer one.
    func testDrillLeavesOutAnotherStoresBackupsInASharedDestination() async throws {
        let mine = work + "/Mine", other = work + "/Other"
        try StoreFixture.make(at: mine, logRows: 20, blobCount: 1)
        try StoreFixture.make(at: other, logRows: 20, blobCount: 1)
        let own = try await StoreHelper(storesDirectory: mine, destination: LocalFolderDestination(folder: backups)).createBackup()
        let theirs = try await StoreHelper(storesDirectory: other, destination: LocalFolderDestination(folder: backups)).createBackup()
        XCTAssertGreaterThan(theirs.name, own.name, "the other store's backup is the newest in the folder")
        let job = StoreJob(name: "mine", storesDirectory: mine, destination: backups, schedule: .daily(hour: 2, minute: 30))
        let service = BackupService(jobs: [job], stateStore: BackupStateStore(directory: stateDirectory), logger: Logger(label: "test"))
        let outcome = try await service.verifyNow("mine")
        XCTAssertEqual(outcome.results.map(\.name), [own.name])
        XCTAssertTrue(outcome.succeeded)
    }

    /// A store with two destinations whose second copy is damaged: a drill at the first only
    /// passes; with `destinations: all` it checks each copy, fails at the second, and says where.
    func testDrillAtEveryDestinationFindsADamagedMirror() async throws {
        let store = work + "/Stores", mirror = work + "/mirror"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let published = try await StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
            .createBackup(alsoTo: [LocalFolderDestination(folder: mirror)])
        let name = try XCTUnwrap(published.first?.backup?.name)
        XCTAssertEqual(published.compactMap(\.backup?.name), [name, name])
        var bytes = try Data(contentsOf: URL(fileURLWithPath: mirror + "/" + name))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: mirror + "/" + name))

        var job = StoreJob(name: "app", storesDirectory: store, destination: backups, schedule: .daily(hour: 2, minute: 30))
        job.mirrors = [mirror]
        job.verify = VerifyDrill(schedule: .daily(hour: 4, minute: 30))
        let states = BackupStateStore(directory: stateDirectory)
        let firstOnly = try await BackupService(jobs: [job], stateStore: states, logger: Logger(label: "test")).verifyNow("app")
        XCTAssertTrue(firstOnly.succeeded)
        XCTAssertEqual(firstOnly.destinations.map(\.destination), [backups])

        job.verify?.everyDestination = true
        let every = try await BackupService(jobs: [job], stateStore: states, logger: Logger(label: "test")).verifyNow("app")
        XCTAssertFalse(every.succeeded)
        XCTAssertEqual(every.destinations.map(\.destination), [backups, mirror])
        XCTAssertEqual(every.destinations.map(\.succeeded), [true, false])
        XCTAssertEqual(every.failures.map(\.destination), [mirror])
        XCTAssertEqual(states.load("app")?.lastVerifyFailure?.destination, mirror)
        XCTAssertEqual(states.load("app")?.lastVerifyFailure?.backups, [name])
    }

    /// The picks on a fixed listing: newest, and every backup within a span (at least the newest).
    func testPicksNewestAndAllWithin() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let listing = (0..<10).map { day in
            BackupListing(name: "day\(day)", size: 1, date: now.addingTimeInterval(-Double(day) * 86_400 - 60), modified: nil)
        }.shuffled()
        XCTAssertEqual(VerifyDrill(schedule: .every(seconds: 60), pick: .newest).select(from: listing, at: now).map(\.name), ["day0"])
        XCTAssertEqual(
            VerifyDrill(schedule: .every(seconds: 60), pick: .allWithin(seconds: 3 * 86_400)).select(from: listing, at: now).map(\.name),
            ["day0", "day1", "day2"])
        let old = listing.filter { $0.name == "day9" }
        XCTAssertEqual(
            VerifyDrill(schedule: .every(seconds: 60), pick: .allWithin(seconds: 86_400)).select(from: old, at: now).map(\.name), ["day9"])
        XCTAssertEqual(try VerifyDrill.Pick.parse("all-within 7d"), .allWithin(seconds: 7 * 86_400))
        XCTAssertThrowsError(try VerifyDrill.Pick.parse("sometimes"))

        let parsed = try BackupConfiguration.parse(
            yaml: """
                schedule: daily 02:30
                verify-after-create: false
                stores:
                  - {name: a, path: /tmp/a, verify: {schedule: "30 4 * * *", pick: all-within 7d, destinations: all}}
                  - {name: b, path: /tmp/b, verify-after-create: true}
                """)
        XCTAssertEqual(
            parsed.stores[0].verify,
            VerifyDrill(
                schedule: try Schedule.parse("30 4 * * *"), pick: .allWithin(seconds: 7 * 86_400),
                everyDestination: true))
        XCTAssertFalse(parsed.stores[0].verifyAfterCreate)
        XCTAssertNil(parsed.stores[1].verify)
        XCTAssertTrue(parsed.stores[1].verifyAfterCreate)
        XCTAssertThrowsError(
            try BackupConfiguration.parse(
                yaml: """
                    schedule: daily 02:30
                    stores: [{name: a, path: /tmp/a, verify: {pick: newest}}]
                    """)
        ) { error in
            XCTAssertTrue("\(error)".contains("stores[0].verify.schedule"), "\(error)")
        }
    }
}
