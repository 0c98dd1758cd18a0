import Foundation

/// The app's data: key/value items in `<stores>/App.sqlite` (WAL), behind one connection.
///
/// An actor, so every database call runs one at a time: once `pauseForSwap()` has run,
/// no request is half-way through the database, and later ones are turned away with
/// `ItemStore.Unavailable` (503) until `reload(from:)` has opened the restored store.
actor ItemStore {
    /// The store is being swapped by a restore (or failed to reopen); try again shortly.
    struct Unavailable: Error, CustomStringConvertible {
        var description: String
    }

    static let databaseName = "App.sqlite"

    private var database: SQLiteDatabase?
    private var unavailableReason = "the store is not open"

    /// Opens the store, creating the database and its table on first start.
    init(storesDirectory: String) throws {
        try FileManager.default.createDirectory(atPath: storesDirectory, withIntermediateDirectories: true)
        let database = try SQLiteDatabase(path: storesDirectory + "/" + Self.databaseName, create: true)
        try database.query("CREATE TABLE IF NOT EXISTS items (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.database = database
    }

    // MARK: requests

    func put(_ key: String, _ value: String) throws {
        try open().query(
            "INSERT INTO items (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
            [key, value])
    }

    func get(_ key: String) throws -> String? {
        try open().query("SELECT value FROM items WHERE key = ?1", [key]).first?.first ?? nil
    }

    func delete(_ key: String) throws -> Bool {
        let database = try open()
        try database.query("DELETE FROM items WHERE key = ?1", [key])
        return try database.query("SELECT changes()").first?.first.flatMap { $0.flatMap(Int.init) } == 1
    }

    func all() throws -> [String: String] {
        var items: [String: String] = [:]
        for row in try open().query("SELECT key, value FROM items ORDER BY key") {
            if let key = row[0], let value = row[1] { items[key] = value }
        }
        return items
    }

    private func open() throws -> SQLiteDatabase {
        guard let database else { throw Unavailable(description: unavailableReason) }
        return database
    }

    // MARK: restore hooks

    /// `willSwap`: stop serving and close the connection, so nothing holds the old files
    /// open while storebackup renames the stores directory.
    func pauseForSwap() {
        unavailableReason = "a restore is swapping the store; try again shortly"
        database?.close()
        database = nil
    }

    /// `reload`: open the store now live in `storesDirectory` and check that this app can
    /// use it. Throwing makes storebackup put the previous store back and call this again.
    func reload(from storesDirectory: String) throws {
        let candidate = try SQLiteDatabase(path: storesDirectory + "/" + Self.databaseName, create: false)
        do {
            let check = try candidate.query("PRAGMA quick_check").first?.first ?? nil
            guard check == "ok" else { throw SQLiteError(description: "quick_check: \(check ?? "no answer")") }
            let table = try candidate.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'items'")
            guard !table.isEmpty else { throw SQLiteError(description: "the restored store has no items table") }
        } catch {
            candidate.close()
            unavailableReason = "the store failed to reload: \(error)"
            throw error
        }
        database = candidate
    }
}
