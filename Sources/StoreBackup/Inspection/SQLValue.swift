import Foundation

/// One value of a row that a query on a backup's database returned, as SQLite typed it.
public enum SQLValue: Sendable, Equatable, Hashable {
    /// SQL NULL.
    case null
    /// An INTEGER.
    case integer(Int64)
    /// A REAL.
    case real(Double)
    /// TEXT (UTF-8).
    case text(String)
    /// A BLOB.
    case blob([UInt8])
}

/// What one statement of a query returned: its column names and its rows.
public struct SQLResult: Sendable, Equatable {
    /// The statement's text, as it was run.
    public var statement: String
    /// The result's column names (empty for a statement that returns no columns).
    public var columns: [String]
    /// The rows, each with one value per column.
    public var rows: [[SQLValue]]

    /// A result of `statement` with these columns and rows.
    public init(statement: String, columns: [String], rows: [[SQLValue]]) {
        self.statement = statement
        self.columns = columns
        self.rows = rows
    }
}
