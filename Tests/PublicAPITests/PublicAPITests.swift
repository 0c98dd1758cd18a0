import Foundation
import Logging
import StoreBackup
import Synchronization
import XCTest

/// The library as an app sees it: only `import StoreBackup`, no `@testable`. Each door is
/// used the way the README and docs/library.md show it, so a change that narrows or renames
/// the public API fails here first.
final class PublicAPITests: XCTestCase {
    var work = ""
    var store = ""
    var backups = ""

    override func setUpWithError() throws {
        work = NSTemporaryDirectory() + "storebackup-public-api-\(UUID().uuidString)"
        store = work + "/Stores"
        backups = work + "/backups"
        try FileManager.default.createDirectory(atPath: store + "/.App_SUPPORT/_EXTERNAL_DATA", withIntermediateDirectories: true)
        try Data("a blob the database points at".utf8).write(to: URL(fileURLWithPath: store + "/.App_SUPPORT/_EXTERNAL_DATA/blob-1"))
        // Enough rows that one more is a small change: an incremental, not a full, holds it.
        try sqlite(
            "CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes(text) VALUES ('first');"
                + "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 3000) "
                + "INSERT INTO notes(text) SELECT printf('%0100d', x) FROM n;")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    // MARK: the store-side door

    func testCreateRestoreAndRecoverThroughStoreHelper() async throws {
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let backup = try await helper.createBackup()
        XCTAssertTrue(backup.name.hasSuffix(" Stores.zip"), backup.name)
        XCTAssertEqual(backup.kind, "full")
        XCTAssertEqual(backup.databases, ["App.sqlite"])
        XCTAssertGreaterThanOrEqual(backup.fileCount, 4, "the database, the blob and the folders on its way")
        XCTAssertNil(backup.base)
        XCTAssertTrue(backup.warnings.isEmpty, "\(backup.warnings)")

        try sqlite("INSERT INTO notes(text) VALUES ('after the backup');")
        // An app running as its own user: other users' processes cannot be seen, and do not open its store.
        let options = RestoreOptions(allowUnseenProcesses: true)
        let restored = try await helper.restore(backup.name, options: options, hooks: .checkDatabases)
        XCTAssertEqual(restored.backupName, backup.name)
        XCTAssertEqual(restored.databasesChecked, ["App.sqlite"])
        XCTAssertEqual(try sqlite("SELECT count(*) FROM notes WHERE text = 'after the backup';"), "0")
        XCTAssertEqual(try sqlite("SELECT text FROM notes WHERE id = 1;"), "first")
        XCTAssertEqual(try helper.recover(), .nothingToDo)
    }

    func testOptionsChooseTheKindOfBackup() async throws {
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let chained = CreateOptions(compressionLevel: CompressionLevel.best, threads: 1, incremental: IncrementalPolicy())
        let full = try await helper.createBackup(chained)
        try sqlite("INSERT INTO notes(text) VALUES ('second');")
        let incremental = try await helper.createBackup(chained)
        XCTAssertEqual(full.kind, "full")
        XCTAssertEqual(incremental.kind, "incremental", incremental.fullReason ?? "")
        XCTAssertEqual(incremental.base, full.name)

        let flushed = LockedFlag()
        let quiesced = try await helper.createBackup(CreateOptions(quiesce: { flushed.set() }))
        XCTAssertTrue(flushed.isSet, "quiesce runs before the store is read")
        XCTAssertEqual(quiesced.kind, "full", "without a chain policy every backup is a full one")
    }

    func testOneBackupPublishedToMirrors() async throws {
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let mirror = LocalFolderDestination(folder: work + "/mirror")
        let outcomes = try await helper.createBackup(alsoTo: [mirror])
        XCTAssertEqual(outcomes.map(\.succeeded), [true, true], "\(outcomes.map(\.error))")
        XCTAssertEqual(outcomes.map(\.destination), [backups, work + "/mirror"])
        XCTAssertEqual(Set(outcomes.compactMap(\.backup?.name)).count, 1, "one archive, one name")

        // Restore from the first destination that holds it: the mirror, once the first lost it.
        try FileManager.default.removeItem(atPath: backups)
        let skipped = SkippedDestinations()
        let restored = try await helper.restore(
            "latest", options: RestoreOptions(allowUnseenProcesses: true), failingOverTo: [mirror],
            skipped: { destination, _ in skipped.append(destination) })
        XCTAssertEqual(restored.backupName, outcomes[1].backup?.name)
        XCTAssertEqual(skipped.names, [backups])
    }

    // MARK: the store-free door

    func testListVerifyLookInsideAndExtractThroughBackupRepository() async throws {
        let made = try await StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups)).createBackup()
        let repository = BackupRepository(destination: LocalFolderDestination(folder: backups))
        let listed = try await repository.list()
        XCTAssertEqual(listed.map(\.name), [made.name])

        let results = try await repository.verify(.latest)
        XCTAssertEqual(results.map(\.ok), [true], results.first?.problem ?? "")
        XCTAssertEqual(results.first?.databases, 1)
        let quick = try await repository.verify(.all, metadataOnly: true)
        XCTAssertEqual(quick.map(\.ok), [true])
        XCTAssertNotNil(quick.first?.warning, "a metadata-only check says what it did not read")

        let contents = try await repository.contents(of: "latest", matching: [".App_SUPPORT/"])
        XCTAssertTrue(contents.hasManifest)
        XCTAssertEqual(contents.backupName, made.name)
        XCTAssertTrue(contents.entries.contains { $0.path == ".App_SUPPORT/_EXTERNAL_DATA/blob-1" && $0.sha256 != nil })

        let extracted = try await repository.extract(
            made.name, paths: [".App_SUPPORT/_EXTERNAL_DATA/blob-1"], into: work + "/one-file", options: ExtractionOptions())
        XCTAssertEqual(extracted.entryCount, 3, "the file and the two folders on its way")
        XCTAssertEqual(
            try String(contentsOfFile: work + "/one-file/.App_SUPPORT/_EXTERNAL_DATA/blob-1", encoding: .utf8),
            "a blob the database points at")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/one-file/App.sqlite"))
    }

    func testCopyPruneAndDeleteThroughBackupRepository() async throws {
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let chained = CreateOptions(incremental: IncrementalPolicy())
        let full = try await helper.createBackup(chained)
        try sqlite("INSERT INTO notes(text) VALUES ('second');")
        let incremental = try await helper.createBackup(chained)
        let repository = helper.repository

        let offsite = LocalFolderDestination(folder: work + "/offsite")
        let copied = try await repository.copy("latest", to: offsite)
        XCTAssertEqual(copied.map(\.name), [full.name, incremental.name], "the base first")
        XCTAssertEqual(copied.map(\.status), [.copied, .copied])

        do {
            try await repository.delete(full.name)
            XCTFail("a base was deleted while an incremental needs it")
        } catch StoreBackupError.backupHasDependents(let name, _, let dependents) {
            XCTAssertEqual(name, full.name)
            XCTAssertEqual(dependents, [incremental.name])
        }
        let planned = try await repository.deletion(of: full.name, withDependents: true)
        XCTAssertEqual(planned, [incremental.name, full.name])

        // Keeping only the newest keeps its base too: a chain is pruned whole or not at all.
        let plan = try await repository.retentionPlan(RetentionPolicy(keepLast: 1), originCache: work + "/state")
        XCTAssertEqual(plan.flatMap(\.toDelete).map(\.name), [])
        let deleted = try await BackupRepository(destination: offsite).delete(full.name, withDependents: true)
        XCTAssertEqual(deleted, [incremental.name, full.name])
        let left = try await BackupRepository(destination: offsite).list()
        XCTAssertEqual(left.count, 0)
        let pruned = try await repository.prune(plan)
        XCTAssertEqual(pruned, [])
    }

    // MARK: the scheduler

    func testTheSchedulerBacksUpAConfiguredStoreNow() async throws {
        var job = StoreJob(name: "app", storesDirectory: store, destination: backups, schedule: try Schedule.parse("daily 03:00"))
        job.retention = RetentionPolicy(keepLast: 1)
        let service = BackupService(jobs: [job], stateStore: BackupStateStore(directory: work + "/state"), logger: Logger(label: "test"))
        let first = try await service.backUpNow("app")
        let second = try await service.backUpNow("app")
        XCTAssertNil(first.error)
        XCTAssertNil(second.error)
        XCTAssertEqual(second.pruned, [first.backup?.name].compactMap { $0 })
        let kept = try await BackupRepository(destination: LocalFolderDestination(folder: backups)).list()
        XCTAssertEqual(kept.map(\.name), [second.backup?.name].compactMap { $0 })
    }

    // MARK: helpers

    /// Runs SQL on the store's database with Python's sqlite3 (the library keeps SQLite to
    /// itself); returns the first column of the last row, if any.
    @discardableResult
    private func sqlite(_ sql: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("PRAGMA journal_mode=WAL")
            rows = []
            for statement in sys.argv[2].split(";"):
                if statement.strip():
                    rows = db.execute(statement).fetchall()
            db.commit()
            db.close()
            print(rows[-1][0] if rows else "", end="")
            """
        process.arguments = ["-c", script, store + "/App.sqlite", sql]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, "python3 sqlite3 failed on: \(sql)")
        return String(decoding: data, as: UTF8.self)
    }
}

/// A flag set from a `@Sendable` closure.
final class LockedFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

/// The destinations a failing-over restore passed over, in order.
final class SkippedDestinations: Sendable {
    private let list = Mutex<[String]>([])
    func append(_ name: String) { list.withLock { $0.append(name) } }
    var names: [String] { list.withLock { $0 } }
}
