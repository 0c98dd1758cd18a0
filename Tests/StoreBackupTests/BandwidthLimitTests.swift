import Foundation
import XCTest

@testable import StoreBackup

/// Issue 36, point 4: `--limit-upload` and `--limit-download` cap the command's total
/// rate, across S3's parallel parts. Only a lower bound on time is asserted (the limit
/// implies it); how close the rate comes to the cap is measured by scripts/bench.
final class BandwidthLimitTests: XCTestCase {
    func testRatesParseWithDecimalSuffixes() throws {
        XCTAssertEqual(try RateLimit.parse("5M", option: "--limit-upload").bytesPerSecond, 5_000_000)
        XCTAssertEqual(try RateLimit.parse("500k", option: "--limit-upload").bytesPerSecond, 500_000)
        XCTAssertEqual(try RateLimit.parse("1.5G", option: "--limit-upload").bytesPerSecond, 1_500_000_000)
        XCTAssertEqual(try RateLimit.parse("20000", option: "--limit-upload").bytesPerSecond, 20_000)
        XCTAssertEqual(try RateLimit.parse("5M", option: "x").text, "5M")
        for bad in ["", "5X", "M", "-5M", "5 MB", "1k", "5e6", "fast"] {
            XCTAssertThrowsError(try RateLimit.parse(bad, option: "--limit-upload"), bad) { error in
                XCTAssertTrue("\(error)".hasPrefix("--limit-upload: \"\(bad)\" is not a usable rate"), "\(error)")
            }
        }
    }

    func testConfigurationTakesRetryBudgetRatesAndLock() throws {
        let configuration = try BackupConfiguration.parse(
            yaml: """
                retry-for: 10m
                limit-upload: 5M
                limit-download: 20M
                retain-days: 30
                retain-mode: compliance
                stores: [{name: app, path: /srv/Stores, schedule: daily 02:00, destination: "s3://b/app"}]
                """)
        let options = configuration.destinationOptions(environment: [:])
        XCTAssertEqual(options.retry.budget, 600)
        XCTAssertEqual(options.transport.uploadLimit?.bytesPerSecond, 5_000_000)
        XCTAssertEqual(options.transport.downloadLimit?.bytesPerSecond, 20_000_000)
        XCTAssertEqual(options.objectLock, ObjectLockRetention(days: 30, mode: .compliance))
        XCTAssertThrowsError(
            try BackupConfiguration.parse(
                yaml: """
                    limit-upload: 5 megabytes
                    stores: [{name: app, path: /srv/Stores, schedule: daily 02:00}]
                    """)
        ) { error in
            XCTAssertTrue("\(error)".contains("limit-upload"), "\(error)")
        }
    }

    func testBadRateOnTheCommandLineIsAClearError() throws {
        let result = try runStoreBackup(["list", "--to", "/nonexistent", "--limit-upload", "5X"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("--limit-upload: \"5X\" is not a usable rate"), result.stderr)
    }

    /// A multipart upload (4 parts in flight) and its download, each capped: the command
    /// takes at least the time the cap implies for the archive's size.
    func testUploadAndDownloadTakeAtLeastWhatTheLimitImplies() throws {
        let servers = try TestServers(label: "ratelimit")
        defer { servers.stop() }
        let s3 = try servers.start("s3")
        let work = try TestEnvironment.temporaryDirectory("ratelimit")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let environment = [
            "AWS_ACCESS_KEY_ID": s3["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": s3["secret_key"] as! String,
            "AWS_REGION": s3["region"] as! String, "HOME": work,
        ]
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 1)
        let random = try XCTUnwrap(FileHandle(forReadingAtPath: "/dev/urandom"))
        try random.readData(ofLength: 36 << 20).write(to: URL(fileURLWithPath: store + "/.App_SUPPORT/video.bin"))
        let to = ["--to", "s3://backups/limited", "--s3-endpoint", s3["endpoint"] as! String]

        let uploadRate = 9_000_000.0
        let started = Date()
        let created = try runStoreBackup(["create", store, "--limit-upload", "9M"] + to, environment: environment)
        let uploadSeconds = Date().timeIntervalSince(started)
        XCTAssertEqual(created.status, 0, created.stderr)
        let listed = try runStoreBackup(["list", "--json"] + to, environment: environment)
        let size = Double(
            (try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])?.first?["size"] as? Int ?? 0)
        XCTAssertGreaterThan(size, Double(32 << 20), "a multipart upload")
        XCTAssertGreaterThanOrEqual(uploadSeconds, 0.8 * size / uploadRate, "the cap holds across parallel parts")

        let downloadRate = 18_000_000.0
        let restoreStarted = Date()
        let restored = try runStoreBackup(
            ["restore", "latest", work + "/Restored", "--yes", "--limit-download", "18M", "--from"] + to.dropFirst(),
            environment: environment)
        let downloadSeconds = Date().timeIntervalSince(restoreStarted)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertGreaterThanOrEqual(downloadSeconds, 0.8 * size / downloadRate)
    }
}
