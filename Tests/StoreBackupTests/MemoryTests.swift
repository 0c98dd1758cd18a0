import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance: memory stays bounded by streaming. A store far larger than the limit is
/// backed up and restored by the command line with a small peak resident set size.
final class MemoryTests: XCTestCase {
    static let limitKiB = 64 * 1024
    /// What a restore streamed from a remote may take beyond a local restore of the same backup.
    static let streamingMarginKiB = 12 * 1024

    func testCreateAndRestoreOfALargeStoreStayUnder64MiB() throws {
        let work = try TestEnvironment.temporaryDirectory("memory")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try Self.makeLargeStore(at: store)

        let createRSS = try peakRSSKiBOfStoreBackup(["create", store, "--to", work + "/backups"])
        let restoreRSS = try peakRSSKiBOfStoreBackup(["restore", "latest", work + "/Restored", "--from", work + "/backups", "--yes"])
        XCTAssertLessThan(createRSS, Self.limitKiB, "create peak RSS \(createRSS) KiB")
        XCTAssertLessThan(restoreRSS, Self.limitKiB, "restore peak RSS \(restoreRSS) KiB")
        XCTAssertEqual(try FileSystem.lstatInfo(work + "/Restored/.App_SUPPORT/big.bin").st_size, 335_544_320)
    }

    /// A restore from S3 unpacks while four ranged requests fill its staging file: their
    /// answers go into the file as they arrive, not into memory.
    func testStreamedRestoreFromS3CostsLittleMoreThanALocalOne() throws {
        let work = try TestEnvironment.temporaryDirectory("memory-s3")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try Self.makeLargeStore(at: store)
        let servers = try TestServers(label: "memory-s3")
        defer { servers.stop() }
        let backend = try ContractBackend.s3(try servers.start("s3"), work: work)
        let created = try runStoreBackup(["create", store] + backend.arguments("memory", "--to", nil), environment: backend.environment)
        XCTAssertEqual(created.status, 0, created.stderr)

        // The same backup restored from a local folder, for comparison.
        let copied = try runStoreBackup(
            ["copy", "latest", "--to", work + "/local"] + backend.arguments("memory", "--from", nil), environment: backend.environment)
        XCTAssertEqual(copied.status, 0, copied.stderr)
        let localRSS = try peakRSSKiBOfStoreBackup(["restore", "latest", work + "/Local", "--from", work + "/local", "--yes"])
        let streamedRSS = try peakRSSKiBOfStoreBackup(
            ["restore", "latest", work + "/Restored", "--yes"] + backend.arguments("memory", "--from", nil),
            environment: backend.environment)
        // The download adds little to a local restore's peak: not its answers (four of up
        // to 8 MiB each would exceed this margin). Relative,
        // because the tests run a debug build, whose local restore is already near the limit.
        XCTAssertLessThan(
            streamedRSS, localRSS + Self.streamingMarginKiB, "streamed restore \(streamedRSS) KiB, local \(localRSS) KiB")
        XCTAssertEqual(try FileSystem.lstatInfo(work + "/Restored/.App_SUPPORT/big.bin").st_size, 335_544_320)
    }

    /// A store far larger than the limit: 320 MiB in one file, half random (stored), half
    /// text (deflated).
    private static func makeLargeStore(at store: String) throws {
        try StoreFixture.make(at: store, logRows: 20_000, blobCount: 2)
        try shell(
            "head -c 167772160 /dev/urandom > '\(store)/.App_SUPPORT/big.bin' && yes 'grocery dude row of text 0123456789' | head -c 167772160 >> '\(store)/.App_SUPPORT/big.bin'"
        )
    }
}
