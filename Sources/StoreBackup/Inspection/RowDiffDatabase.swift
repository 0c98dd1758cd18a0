/// What changed in one database between two sides of a diff: its tables' rows and its schema.
public struct DatabaseDiff: Sendable, Equatable {
    /// Whether the database is on both sides.
    public enum Presence: String, Sendable, Equatable {
        /// On both sides.
        case both
        /// Only on the newer side.
        case added
        /// Only on the older side.
        case removed
    }

    /// The database's path relative to the stores directory (as `storebackup ls` shows it).
    public var path: String
    /// Whether it is on both sides (a database on one side only has no tables listed).
    public var presence: Presence
    /// The tables compared, by name; only those with changes unless every table was asked for.
    public var tables: [TableDiff]
    /// Tables, indexes, triggers and views added, removed or redefined.
    public var schemaChanges: [SchemaChange]

    /// Whether anything differs.
    public var hasChanges: Bool {
        presence != .both || !schemaChanges.isEmpty || tables.contains(where: \.hasChanges)
    }
}

/// A table, index, trigger or view that is on one side only, or defined differently.
public struct SchemaChange: Sendable, Equatable {
    /// What happened to the object going from the older database to the newer.
    public enum Kind: String, Sendable, Equatable {
        /// Only in the newer database.
        case added
        /// Only in the older database.
        case removed
        /// On both sides with different SQL.
        case changed
    }

    /// What happened to the object.
    public var kind: Kind
    /// "table", "index", "trigger" or "view".
    public var type: String
    /// The object's name.
    public var name: String
    /// The table an index or trigger belongs to (a table's or view's own name otherwise).
    public var table: String
    /// The object's SQL in the older database (nil when added).
    public var before: String?
    /// The object's SQL in the newer database (nil when removed).
    public var after: String?
}
