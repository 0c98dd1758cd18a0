/// What changed in one table between two databases: row counts and, when asked for, the rows.
///
/// Rows are matched by ``keyColumns``: the primary key, else the rowid. A table with neither
/// (or whose key is not the same on both sides) is compared whole, as sets of rows:
/// ``comparison`` says which, so a reader knows what "changed" can mean.
public struct TableDiff: Sendable, Equatable {
    /// How rows of the two sides were matched.
    public enum Comparison: String, Sendable, Equatable {
        /// By the table's primary key (WITHOUT ROWID tables, and rowid tables whose key
        /// columns hold no NULL).
        case primaryKey
        /// By the rowid (a table without a primary key, or one whose key holds a NULL).
        case rowid
        /// Whole rows as sets: no key names a row on both sides; only inserted and
        /// deleted rows are counted (a changed row is one of each).
        case whole
        /// Not compared row by row: a view or virtual table (a virtual table's data is in
        /// its shadow tables, which are compared), or a table on one side only.
        case notCompared
    }

    /// Whether the table is on both sides.
    public enum Presence: String, Sendable, Equatable {
        /// On both sides.
        case both
        /// Only in the newer database.
        case added
        /// Only in the older database.
        case removed
    }

    /// The table's name.
    public var name: String
    /// Whether it is on both sides; a table on one side only counts all its rows as
    /// inserted (added) or deleted (removed).
    public var presence: Presence
    /// How the rows were matched.
    public var comparison: Comparison
    /// The columns that name a row (`rowid` or its alias for ``Comparison/rowid``); empty
    /// when the table is compared whole or not at all.
    public var keyColumns: [String]
    /// The columns compared (those on both sides, without generated columns).
    public var columns: [String]
    /// Rows only in the newer database.
    public var inserted: Int
    /// Rows only in the older database.
    public var deleted: Int
    /// Rows on both sides (same key) whose values differ.
    public var changed: Int
    /// The changed rows themselves, when rows were asked for, in the order deleted, changed,
    /// inserted; empty otherwise.
    public var rows: [RowChange]
    /// Why the table was compared the way it was, when that is not the plain case
    /// (e.g. "no primary key and no usable rowid: compared whole").
    public var note: String?

    /// Whether anything differs.
    public var hasChanges: Bool { inserted + deleted + changed > 0 }
}

/// One row that differs between two databases; every value is an exact SQL literal
/// (`42`, `0.1`, `1.0e+308`, `'it''s'`, `X'00FF'`, `NULL`), as SQLite's `quote()` writes it.
public struct RowChange: Sendable, Equatable {
    /// What happened to the row going from the older database to the newer.
    public enum Kind: String, Sendable, Equatable {
        /// Only in the newer database.
        case inserted
        /// Only in the older database.
        case deleted
        /// On both sides, with different values.
        case changed
    }

    /// What happened to the row.
    public var kind: Kind
    /// The row's key values, in the order of ``keyColumns`` (empty for a table compared whole).
    public var key: [String]
    /// The columns that name the row (``TableDiff/keyColumns``).
    public var keyColumns: [String]
    /// The row in the older database (nil when inserted): one literal per column of
    /// ``columns``.
    public var before: [String]?
    /// The row in the newer database (nil when deleted).
    public var after: [String]?
    /// The column names ``before`` and ``after`` follow.
    public var columns: [String]

    /// The columns whose values differ (every column for an inserted or deleted row).
    public var changedColumns: [String] {
        guard let before, let after else { return columns }
        return zip(columns, zip(before, after)).filter { $0.1.0 != $0.1.1 }.map(\.0)
    }
}
