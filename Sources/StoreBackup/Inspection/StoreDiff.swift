import Foundation

/// What changed between a backup and a later backup, or a backup and the live store:
/// files, and each database's rows and schema. ``BackupRepository/diff(_:_:options:onRow:)``
/// makes one.
public struct StoreDiff: Sendable, Equatable {
    /// A file, link or other non-database entry that is on one side only, or differs.
    public struct FileChange: Sendable, Equatable {
        /// What happened to the file going from the older side to the newer.
        public enum Kind: String, Sendable, Equatable {
            /// Only on the newer side.
            case added
            /// Only on the older side.
            case removed
            /// On both sides with different content (SHA-256), link target or type.
            case changed
        }

        /// What happened to the file.
        public var kind: Kind
        /// The path relative to the stores directory (as `storebackup ls` shows it).
        public var path: String
        /// "file", "symlink" or "fifo": the newer side's type (the older's when removed).
        public var type: String
        /// Its size on the older side (nil when added).
        public var sizeBefore: Int64?
        /// Its size on the newer side (nil when removed).
        public var sizeAfter: Int64?
    }

    /// The older side: a backup's name (resolved when `latest` was asked for).
    public var older: String
    /// The newer side: a backup's name, or the live stores directory's path.
    public var newer: String
    /// Whether the newer side is the live store.
    public var newerIsLive: Bool
    /// The databases compared, by path.
    public var databases: [DatabaseDiff]
    /// The files (not databases) added, removed or changed, by path. Core Data's external
    /// data (`.App_SUPPORT/_EXTERNAL_DATA/<UUID>`), which belongs to rows, is among them.
    public var files: [FileChange]

    /// Whether anything differs.
    public var hasChanges: Bool { !files.isEmpty || databases.contains(where: \.hasChanges) }
}

/// The newer side of a diff.
public enum DiffSide: Sendable, Equatable {
    /// A backup at the repository's destination, by name or `latest`.
    case backup(String)
    /// The live stores directory at this path, read as it is now (each database as one
    /// committed state).
    case live(storesDirectory: String)
}

/// What a diff compares and lists.
public struct DiffOptions: Sendable, Equatable {
    /// Only this database (its path in the stores directory); nil for every database.
    public var database: String?
    /// Only these tables of ``database`` (which they need); empty for all.
    public var tables: [String]
    /// Only rows for which this SQL boolean expression over a table's columns holds on
    /// either side (`--where`); nil for every row.
    public var filter: String?
    /// Keep up to this many changed rows per table in ``TableDiff/rows``; 0 for counts only.
    public var keepRows: Int
    /// List unchanged tables too.
    public var includeUnchanged: Bool

    /// Options for a diff; the defaults compare everything and count rows.
    public init(
        database: String? = nil, tables: [String] = [], filter: String? = nil, keepRows: Int = 0, includeUnchanged: Bool = false
    ) {
        self.database = database
        self.tables = tables
        self.filter = filter
        self.keepRows = keepRows
        self.includeUnchanged = includeUnchanged
    }
}
