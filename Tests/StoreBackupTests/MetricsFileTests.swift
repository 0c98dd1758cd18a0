import Foundation
import XCTest

@testable import StoreBackup

/// `--metrics-file` and `metrics: {file: …}`: the command line writes what the library reports
/// through swift-metrics as a Prometheus text file, atomically, and carries counters and the
/// last success time over from one run to the next (each run is a new process).
final class MetricsFileTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var metricsFile: String { work + "/textfile/storebackup.prom" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("metrics")
        try StoreFixture.make(at: store, logRows: 2_000)
        try FileManager.default.createDirectory(atPath: work + "/textfile", withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// The value of the one sample of `name` whose labels include every pair of `labels`.
    private func sample(_ name: String, _ labels: [String: String]) throws -> Double? {
        let text = try String(contentsOfFile: metricsFile, encoding: .utf8)
        let lines = text.split(separator: "\n").filter { line in
            line.hasPrefix(name + "{") && labels.allSatisfy { line.contains("\($0.key)=\"\($0.value)\"") }
        }
        XCTAssertLessThanOrEqual(lines.count, 1, text)
        return lines.first.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    func testCountsCarryOverAndAFailureKeepsTheLastSuccessTime() throws {
        let created = try runStoreBackup(["create", store, "--to", backups, "--metrics-file", metricsFile])
        XCTAssertEqual(created.status, 0, created.stderr)
        let success = ["store": store, "outcome": "success"]
        XCTAssertEqual(try sample("storebackup_backups_total", success), 1)
        let lastSuccess = try XCTUnwrap(try sample("storebackup_last_success_timestamp_seconds", ["store": store]))
        XCTAssertEqual(lastSuccess, Date().timeIntervalSince1970, accuracy: 600)
        let size = try XCTUnwrap(try sample("storebackup_backup_size_bytes", ["store": store]))
        let archive = try FileManager.default.contentsOfDirectory(atPath: backups).filter { $0.hasSuffix(" Stores.zip") }
        XCTAssertEqual(archive.count, 1)
        let attributes = try FileManager.default.attributesOfItem(atPath: backups + "/" + archive[0])
        XCTAssertEqual(size, Double((attributes[.size] as? NSNumber)?.int64Value ?? -1))
        // node_exporter runs as another user: the file is world-readable (it holds no secret).
        let mode = try FileManager.default.attributesOfItem(atPath: metricsFile)[.posixPermissions] as? NSNumber
        XCTAssertEqual(mode?.intValue, 0o644)

        // A failed run: its failure is counted, the earlier success and its time are kept.
        try FileManager.default.removeItem(atPath: store + "/Settings.sqlite")
        try FileManager.default.removeItem(atPath: store + "/App.sqlite")
        let failed = try runStoreBackup(["create", store, "--to", backups, "--metrics-file", metricsFile])
        XCTAssertEqual(failed.status, 1, failed.stderr)
        XCTAssertEqual(try sample("storebackup_backups_total", success), 1)
        XCTAssertEqual(try sample("storebackup_backups_total", ["store": store, "outcome": "failure"]), 1)
        XCTAssertEqual(try sample("storebackup_last_success_timestamp_seconds", ["store": store]), lastSuccess)
        XCTAssertNotNil(try sample("storebackup_last_failure_timestamp_seconds", ["store": store]))

        // Only the metrics file is left in its folder: no temporary beside it.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/textfile"), ["storebackup.prom"])
    }

    /// A damaged or hand-edited metrics file (NaN, huge or negative counters, garbage lines)
    /// is not trusted: the run still succeeds and writes a good file.
    func testADamagedPreviousFileIsNotTrusted() throws {
        try """
        # TYPE storebackup_backups_total counter
        storebackup_backups_total{store="x",destination="y",outcome="success"} NaN
        storebackup_backups_total{store="x",destination="y",outcome="failure"} 1e300
        storebackup_backups_total{store="z",destination="y",outcome="failure"} -5
        storebackup_last_success_timestamp_seconds{store="x" 12
        garbage
        """.write(toFile: metricsFile, atomically: false, encoding: .utf8)
        let created = try runStoreBackup(["create", store, "--to", backups, "--metrics-file", metricsFile])
        XCTAssertEqual(created.status, 0, created.stderr)
        XCTAssertEqual(try sample("storebackup_backups_total", ["store": store, "outcome": "success"]), 1)
        let text = try String(contentsOfFile: metricsFile, encoding: .utf8)
        XCTAssertFalse(text.contains("NaN") || text.contains("e+300") || text.contains("garbage"), text)
    }

    func testTheConfigurationNamesTheFileAndTheStore() throws {
        let configuration = work + "/storebackup.yml"
        try """
        destination: \(backups)
        state-directory: \(work)/state
        metrics: {file: \(metricsFile)}
        schedule: daily 02:30
        stores:
          - name: app
            path: \(store)
            retention: {keep-last: 1}
        """.write(toFile: configuration, atomically: false, encoding: .utf8)
        for _ in 0..<2 {
            let result = try runStoreBackup(["create", "--config", configuration, "--store", "app", "--prune"])
            XCTAssertEqual(result.status, 0, result.stderr)
        }
        XCTAssertEqual(try sample("storebackup_backups_total", ["store": "app", "outcome": "success"]), 2)
        // keep-last 1: the second run removed the first backup.
        XCTAssertEqual(try sample("storebackup_retention_removed_total", ["destination": backups]), 1)
    }
}
