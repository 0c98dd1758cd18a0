import CoreMetrics
import Foundation
import MetricsTestKit
import XCTest

@testable import StoreBackup

/// Every metric the library exports (BackupMetrics) is reported, with its dimensions and
/// the right value, after a success and after a failure, as an embedding app's metrics
/// system receives it (swift-metrics' TestMetrics, bootstrapped once for the process).
final class ExportedMetricsTests: XCTestCase {
    /// The metrics system of this test process (swift-metrics allows one bootstrap).
    static let metrics: TestMetrics = {
        let metrics = TestMetrics()
        MetricsSystem.bootstrap(metrics)
        return metrics
    }()

    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("exported-metrics")
        try StoreFixture.make(at: store, logRows: 200, blobCount: 2)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testEveryBackupMetricAfterASuccessAndAFailure() async throws {
        let metrics = Self.metrics
        let destination = LocalFolderDestination(folder: backups)
        let helper = StoreHelper(storesDirectory: store, destination: destination)
        // Unique per run: metrics of other tests in this process never mix in.
        let place = [("store", store), ("destination", destination.displayName)]

        let started = Date()
        let created = try await helper.createBackup()
        let archiveSize = try XCTUnwrap(
            (try FileManager.default.attributesOfItem(atPath: backups + "/" + created.name)[.size] as? NSNumber)?.int64Value)
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.backups, place + [("outcome", "success")]).totalValue, 1)
        let duration = try XCTUnwrap(try metrics.expectGauge(BackupMetrics.duration, place).lastValue)
        XCTAssertGreaterThan(duration, 0)
        XCTAssertLessThanOrEqual(duration, Date().timeIntervalSince(started), "the run's own span, in seconds")
        XCTAssertEqual(try metrics.expectGauge(BackupMetrics.archiveSize, place).lastValue, Double(archiveSize))
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.uploadedBytes, place).totalValue, archiveSize)
        let success = try XCTUnwrap(try metrics.expectGauge(BackupMetrics.lastSuccess, place).lastValue)
        XCTAssertEqual(success, Date().timeIntervalSince1970, accuracy: 60)
        XCTAssertNil(try? metrics.expectGauge(BackupMetrics.lastFailure, place), "no failure yet")

        // A failure: no databases left to back up.
        for database in ["App.sqlite", "Settings.sqlite"] { try FileManager.default.removeItem(atPath: store + "/" + database) }
        do {
            _ = try await helper.createBackup()
            XCTFail("a store without databases must fail")
        } catch StoreBackupError.noDatabases {}
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.backups, place + [("outcome", "failure")]).totalValue, 1)
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.backups, place + [("outcome", "success")]).totalValue, 1)
        XCTAssertEqual(try metrics.expectGauge(BackupMetrics.duration, place).values.count, 2, "the failed run's duration too")
        XCTAssertEqual(
            try metrics.expectCounter(BackupMetrics.uploadedBytes, place).totalValue, archiveSize, "nothing uploaded by a failure")
        XCTAssertEqual(try metrics.expectGauge(BackupMetrics.archiveSize, place).values.count, 1, "no size for a failure")
        XCTAssertEqual(try metrics.expectGauge(BackupMetrics.lastSuccess, place).lastValue, success, "the last success is kept")
        let failure = try XCTUnwrap(try metrics.expectGauge(BackupMetrics.lastFailure, place).lastValue)
        XCTAssertGreaterThanOrEqual(failure, success)
    }

    func testRestoresAndRetentionAreCounted() async throws {
        let metrics = Self.metrics
        let destination = LocalFolderDestination(folder: backups)
        let helper = StoreHelper(storesDirectory: store, destination: destination)
        let place = [("store", store), ("destination", destination.displayName)]
        let first = try await helper.createBackup()
        _ = try await helper.restore(first.name)
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.restores, place + [("outcome", "success")]).totalValue, 1)
        do {
            _ = try await helper.restore("2000-01-01 000000 Stores.zip")
            XCTFail("a backup that does not exist cannot be restored")
        } catch StoreBackupError.backupNotFound {}
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.restores, place + [("outcome", "failure")]).totalValue, 1)
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.restores, place + [("outcome", "success")]).totalValue, 1)

        // Retention: with keep-last 1, the older of two backups of the store (a copy under
        // an older name) is removed and counted once.
        let older = "2001-01-01 000000 Stores.zip"
        try FileManager.default.copyItem(atPath: backups + "/" + first.name, toPath: backups + "/" + older)
        let pruner = BackupPruner(destination: destination, stateDirectory: nil)
        let deleted = try await pruner.execute(try await pruner.plan(RetentionPolicy(keepLast: 1), host: nil, storesDirectory: nil))
        XCTAssertEqual(deleted, [older])
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.retentionRemoved, [("destination", destination.displayName)]).totalValue, 1)
    }
}
