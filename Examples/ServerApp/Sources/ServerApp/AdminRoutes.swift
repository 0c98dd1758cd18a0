import Foundation
import Hummingbird
import Logging
import StoreBackup

/// Backup administration over HTTP, thin over `StoreHelper` and `BackupService`:
///
/// - `GET /admin/backups`: the destination's backups, newest first
/// - `POST /admin/backups`: back up now (through the service: retention and state as a
///   scheduled run)
/// - `POST /admin/backups/{name}/restore`: restore it (or `latest`) without restarting
/// - `DELETE /admin/backups/{name}`
///
/// Names contain spaces; percent-encode them in the path.
/// A real app would put these behind authentication.
struct AdminRoutes {
    let helper: StoreHelper
    let backupService: BackupService
    let storeName: String
    let store: ItemStore
    let swapHold: SwapHold
    let logger: Logger

    struct Backup: Codable {
        var name: String
        var size: Int64
        var date: Date
    }

    struct BackupList: ResponseEncodable {
        var backups: [Backup]
    }

    struct Created: ResponseEncodable {
        var name: String
        var size: Int64
        var files: Int
        var databases: Int
        /// Backups the retention policy removed after this one.
        var pruned: [String]
    }

    struct Restored: ResponseEncodable {
        var backup: String
        var databasesChecked: [String]
        var files: Int
    }

    /// How the server takes part in a restore: stop serving and close the database before
    /// the swap, reopen and check it after; a store that fails the check is rolled back.
    var reloadHooks: ReloadHooks {
        let store = self.store, swapHold = self.swapHold, logger = self.logger
        return ReloadHooks(
            willSwap: {
                await store.pauseForSwap()
                await swapHold.waitForRelease()
            },
            reload: { storesDirectory in
                try await store.reload(from: storesDirectory)
            },
            didRollback: { error in
                logger.warning("restored store rejected, previous store is live again: \(error)")
            })
    }

    func register(on router: Router<BasicRequestContext>) {
        let admin = router.group("admin")
        admin.get("backups") { _, _ in
            let backups = try await run { try await helper.repository.list() }
            return BackupList(backups: backups.map { Backup(name: $0.name, size: $0.size, date: $0.date) })
        }
        admin.post("backups") { _, _ in
            let outcome = try await run { try await backupService.backUpNow(storeName) }
            guard let result = outcome.backup else { throw HTTPError(.internalServerError) }
            return Created(
                name: result.name, size: result.size, files: result.fileCount,
                databases: result.databases.count, pruned: outcome.pruned)
        }
        admin.post("backups/:name/restore") { _, context in
            let name = try backupName(context)
            let result = try await run { try await helper.restore(name, hooks: reloadHooks) }
            logger.info("restored \(result.backupName)")
            return Restored(backup: result.backupName, databasesChecked: result.databasesChecked, files: result.fileCount)
        }
        admin.delete("backups/:name") { _, context -> HTTPResponse.Status in
            let name = try backupName(context)
            try await run { try await helper.repository.delete(name) }
            return .noContent
        }
        if swapHold.enabled {
            admin.post("test/release-swap") { _, _ -> HTTPResponse.Status in
                await swapHold.release()
                return .noContent
            }
        }
    }

    private func backupName(_ context: BasicRequestContext) throws -> String {
        let raw = try context.parameters.require("name")
        guard let name = raw.removingPercentEncoding else { throw HTTPError(.badRequest, message: "bad percent-encoding\n") }
        return name
    }

    /// Runs a library call and turns its typed errors into HTTP answers.
    private func run<T>(_ work: () async throws -> T) async throws -> T {
        do {
            return try await work()
        } catch let error as StoreBackupError {
            throw HTTPError(Self.status(for: error), message: error.description + "\n")
        }
    }

    static func status(for error: StoreBackupError) -> HTTPResponse.Status {
        switch error {
        case .backupNotFound, .noBackups: return .notFound
        case .invalidBackupName: return .badRequest
        case .storeLocked, .backupExists, .restoreRefused, .backupAlreadyRunning, .backupHasDependents: return .conflict
        case .reloadFailed, .corruptArchive, .checksumMismatch, .unsafeArchiveEntry, .databaseCheckFailed:
            return .unprocessableContent
        case .destination, .transfer: return .badGateway
        case .cancelled: return .serviceUnavailable
        default: return .internalServerError
        }
    }
}
