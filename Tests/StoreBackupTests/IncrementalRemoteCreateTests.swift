import Foundation
import XCTest

@testable import StoreBackup

/// Incremental create at every kind of destination (local folder, S3 through rclone and
/// moto, WebDAV, SFTP, the Dropbox emulator), real servers on loopback: a full, then an
/// incremental on it, whose base is listed there; a base removed there gives a full.
final class IncrementalRemoteCreateTests: XCTestCase {
    func testFullThenIncrementalAtEveryDestination() async throws {
        let servers = try TestServers(label: "incremental")
        defer { servers.stop() }
        let dropbox = try DropboxEmulatorClient(label: "incremental-dropbox")
        defer { dropbox.stop() }
        let work = try TestEnvironment.temporaryDirectory("incremental-remote")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 2_000, blobCount: 3)
        let backends = try ContractBackend.all(servers: servers, dropbox: dropbox, work: work)
        let policy = RetryPolicy(requestAttempts: 2, operationAttempts: 1, initialDelay: 0.01, maximumDelay: 0.02)

        for (number, backend) in backends.enumerated() {
            let destination = try backend.make("chain-\(number)", nil, policy)
            let helper = ChainedHelper(StoreHelper(storesDirectory: store, destination: destination))
            let full = try await helper.createBackup()
            XCTAssertEqual(full.kind, "full", backend.label)
            let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
            try app.execute("UPDATE accounts SET balance = balance + 1 WHERE id = \(number + 1)", operation: "update")
            app.close()
            let incremental = try await helper.createBackup()
            XCTAssertEqual(incremental.kind, "incremental", backend.label)
            XCTAssertEqual(incremental.base, full.name, backend.label)
            let listed = try await destination.sortedBackups()
            XCTAssertEqual(Set(listed.map(\.name)), [full.name, incremental.name], backend.label)
            XCTAssertEqual(listed.first { $0.name == incremental.name }?.size, incremental.size, backend.label)
            XCTAssertLessThan(incremental.size * 3, full.size, "\(backend.label): only the changes")
            // The incremental restores from the remote chain, the update included.
            let restored = work + "/restored-\(number)/Stores"
            _ = try await StoreHelper(storesDirectory: restored, destination: destination).restore(incremental.name)
            XCTAssertEqual(
                try StoreFixture.query(restored + "/App.sqlite", "SELECT balance FROM accounts WHERE id = \(number + 1)"),
                try StoreFixture.query(store + "/App.sqlite", "SELECT balance FROM accounts WHERE id = \(number + 1)"),
                backend.label)

            try await destination.delete(incremental.name)
            let afterDelete = try await helper.createBackup()
            XCTAssertEqual(afterDelete.kind, "full", "\(backend.label): the base is gone there")
        }
    }
}
