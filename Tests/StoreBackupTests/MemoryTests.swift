import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance: memory stays bounded by streaming. A store far larger than the limit is
/// backed up and restored by the command line with a small peak resident set size.
final class MemoryTests: XCTestCase {
    static let limitKiB = 64 * 1024

    func testCreateAndRestoreOfALargeStoreStayUnder64MiB() throws {
        let work = try TestEnvironment.temporaryDirectory("memory")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 20_000, blobCount: 2)
        // 320 MiB in one file: half random (stored), half text (deflated).
        try shell(
            "head -c 167772160 /dev/urandom > '\(store)/.App_SUPPORT/big.bin' && yes 'grocery dude row of text 0123456789' | head -c 167772160 >> '\(store)/.App_SUPPORT/big.bin'"
        )

        let createRSS = try peakRSSKiBOfStoreBackup(["create", store, "--to", work + "/backups"])
        let restoreRSS = try peakRSSKiBOfStoreBackup(["restore", "latest", work + "/Restored", "--from", work + "/backups", "--yes"])
        XCTAssertLessThan(createRSS, Self.limitKiB, "create peak RSS \(createRSS) KiB")
        XCTAssertLessThan(restoreRSS, Self.limitKiB, "restore peak RSS \(restoreRSS) KiB")
        XCTAssertEqual(try FileSystem.lstatInfo(work + "/Restored/.App_SUPPORT/big.bin").st_size, 335_544_320)
    }
}
