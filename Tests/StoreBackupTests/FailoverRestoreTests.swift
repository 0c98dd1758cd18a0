import Foundation
import XCTest

@testable import StoreBackup

/// Restore with failover in the library: the first destination that holds the backup is
/// used, the others are reported as skipped, and nothing changes when none holds it.
final class FailoverRestoreTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("failover")
        try StoreFixture.make(at: store, logRows: 2_000)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private func theme() throws -> String { try StoreFixture.query(store + "/Settings.sqlite", "SELECT v FROM kv") }

    func testRestoresFromTheFirstDestinationThatHoldsTheBackup() async throws {
        let empty = LocalFolderDestination(folder: work + "/empty")
        let holding = LocalFolderDestination(folder: work + "/second")
        let backup = try await StoreHelper(storesDirectory: store, destination: holding).createBackup()
        let before = try theme()
        let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
        try settings.execute("UPDATE kv SET v='changed'", operation: "change")
        settings.close()

        let skipped = Locked<[String]>([])
        let result = try await StoreHelper(storesDirectory: store, destination: empty)
            .restore("latest", failingOverTo: [holding], skipped: { name, _ in skipped.withLock { $0.append(name) } })

        XCTAssertEqual(result.backupName, backup.name, "latest resolved at the destination that holds it")
        XCTAssertEqual(try theme(), before, "the store holds the backup again")
        XCTAssertEqual(skipped.withLock { $0 }, [empty.displayName], "the empty destination was reported as skipped")
    }

    func testNoDestinationHoldingTheBackupChangesNothing() async throws {
        let first = LocalFolderDestination(folder: work + "/a")
        let second = LocalFolderDestination(folder: work + "/b")
        let before = try theme()
        do {
            _ = try await StoreHelper(storesDirectory: store, destination: first).restore("latest", failingOverTo: [second])
            XCTFail("restore without any backup must fail")
        } catch let error as StoreBackupError {
            guard case .restoreRefused(let reason) = error else { return XCTFail("unexpected \(error)") }
            XCTAssertTrue(reason.contains(first.displayName) && reason.contains(second.displayName), reason)
        }
        XCTAssertEqual(try theme(), before)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store + "_New"))
    }
}
