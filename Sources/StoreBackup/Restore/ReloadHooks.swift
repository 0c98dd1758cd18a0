import Foundation

/// How the app around a store takes part in a restore.
///
/// - `willSwap`: called before the live folder is renamed; pause writes, close connections.
/// - `reload`: called with the stores directory once the restored store is live; open and
///   validate it. Throwing rejects the restore: the old store is put back and `reload`
///   is called again on it.
/// - `didRollback`: called after a rejected store was moved aside and the old one is live.
public struct ReloadHooks: Sendable {
    public var willSwap: @Sendable () async throws -> Void
    public var reload: @Sendable (_ storesDirectory: String) async throws -> Void
    public var didRollback: @Sendable (_ error: Error) async -> Void

    public init(
        willSwap: @escaping @Sendable () async throws -> Void = {},
        reload: @escaping @Sendable (_ storesDirectory: String) async throws -> Void,
        didRollback: @escaping @Sendable (_ error: Error) async -> Void = { _ in }
    ) {
        self.willSwap = willSwap
        self.reload = reload
        self.didRollback = didRollback
    }

    /// What the command line does: open every database in the store and run `PRAGMA quick_check`.
    public static let checkDatabases = ReloadHooks(reload: { directory in
        try DatabaseCheck.quickCheckAll(in: directory)
    })
}

public enum DatabaseCheck {
    /// Opens every SQLite database under `directory` (found by header) and runs quick_check.
    public static func quickCheckAll(in directory: String) throws {
        let scan = try StoreScanner.scan(storesDirectory: directory)
        for item in scan.items where item.kind == .database {
            let connection = try SQLiteConnection(path: item.absolutePath, mode: .readWrite)
            defer { connection.close() }
            connection.setBusyTimeout(milliseconds: 5000)
            try connection.check(quick: true)
        }
    }
}
