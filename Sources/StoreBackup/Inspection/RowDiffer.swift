/// Compares two SQLite databases row by row: per table, the rows inserted, deleted and
/// changed, and the schema objects added, removed or redefined; and writes the SQL that
/// brings the newer database's rows back to the older's (``undoSQL(tables:filter:write:)``).
///
/// Both databases are attached, read-only, to one connection and read inside one read
/// transaction each, so a live database is seen as one committed state while a writer goes
/// on. Rows stream through SQLite: memory does not grow with the tables. How the databases
/// got here (a live file, an extracted copy, a backup read in place) is not its business:
/// it takes whatever `ATTACH` opens.
///
/// ```swift
/// let differ = try RowDiffer(older: "/tmp/old/App.sqlite", newer: "file:/srv/Stores/App.sqlite?mode=ro")
/// let diff = try differ.compare(path: "App.sqlite")
/// for table in diff.tables { print(table.name, table.inserted, table.deleted, table.changed) }
/// ```
///
/// Not `Sendable`: use it on one thread (it holds one SQLite connection).
public final class RowDiffer {
    let connection: RowDiffConnection
    let older: RowDiffSchema
    let newer: RowDiffSchema
    /// What the connection attached, for a second one (``sidesAreFixed``).
    private let locations: (older: String, newer: String)
    private let cancel: CancellationFlag?
    /// Whether neither side can change while the differ reads it and any thread may read
    /// it (scratch copies of backups; not a live database): a second connection then sees
    /// the same rows, and a table's inserted rows are counted on it at the same time as
    /// the deleted and changed ones.
    private let sidesAreFixed: Bool

    /// Opens both databases read-only. `older` and `newer` are paths or `file:` URIs (a
    /// live database: `file:PATH?mode=ro`, percent-encoded); a path is opened read-only.
    ///
    /// - Throws: ``StoreBackupError/sqlite(path:operation:message:)`` when one cannot be
    ///   opened or read.
    public convenience init(older: String, newer: String) throws {
        try self.init(older: older, newer: newer, cancel: nil)
    }

    /// ``init(older:newer:)``, whose queries stop when `cancel` is set; `sidesAreFixed` when
    /// neither side can change (see ``sidesAreFixed``).
    init(older: String, newer: String, cancel: CancellationFlag?, sidesAreFixed: Bool = false) throws {
        locations = (Self.readOnly(older), Self.readOnly(newer))
        self.cancel = cancel
        self.sidesAreFixed = sidesAreFixed
        connection = try RowDiffConnection(older: locations.older, newer: locations.newer, cancel: cancel)
        self.older = try RowDiffSchema.read(connection, schema: RowDiffConnection.older)
        self.newer = try RowDiffSchema.read(connection, schema: RowDiffConnection.newer)
    }

    /// Ends both read transactions and closes the connection (also done when released).
    public func close() { connection.close() }

    /// A plain path as a read-only URI; a URI read-only too (`mode=ro` unless it names a
    /// mode): ATTACH opens with the connection's own flags otherwise, and the backup VFS
    /// opens nothing for writing.
    static func readOnly(_ location: String) -> String {
        guard location.hasPrefix("file:") else { return "file:" + SQLiteConnection.uriEscaped(location) + "?mode=ro" }
        guard !location.contains("?mode=") && !location.contains("&mode=") else { return location }
        return location + (location.contains("?") ? "&" : "?") + "mode=ro"
    }

    /// Every table name on either side, sorted (views are schema objects, not tables here).
    public var tableNames: [String] {
        let tables = (Array(older.tables.values) + Array(newer.tables.values)).filter { $0.type != "view" }
        return Set(tables.map(\.name)).sorted()
    }

    /// Compares the two databases.
    ///
    /// - Parameters:
    ///   - path: The database's path in the stores directory, for the result.
    ///   - tables: Only these tables (and their indexes and triggers); empty for all.
    ///   - filter: An SQL boolean expression over a table's columns (`--where`): only rows
    ///     for which it holds, on either side, are compared. Nil for every row.
    ///   - includeUnchanged: List tables without changes too.
    ///   - keepRows: Keep up to this many changed rows per table in ``TableDiff/rows``.
    ///   - onRow: Called with each changed row as it is found (the table's name first), for
    ///     a listing that does not collect.
    /// - Throws: ``StoreBackupError/diffRefused(reason:)`` for a table on neither side,
    ///   ``StoreBackupError/sqlite(path:operation:message:)`` when a query fails (a bad
    ///   `filter`, say).
    public func compare(
        path: String = "", tables: [String] = [], filter: String? = nil, includeUnchanged: Bool = false, keepRows: Int = 0,
        onRow: ((String, RowChange) throws -> Void)? = nil
    ) throws -> DatabaseDiff {
        try compare(
            path: path, tables: tables, filter: filter, includeUnchanged: includeUnchanged, keepRows: keepRows, scopes: [:],
            onRow: onRow)
    }

    /// ``compare(path:tables:filter:includeUnchanged:keepRows:onRow:)`` that reads, of each
    /// table in `scopes`, only the rows whose rowids are in its ranges (none: the table's
    /// rows are the same on both sides), as ``ChangedRowids`` finds them.
    func compare(
        path: String, tables: [String], filter: String?, includeUnchanged: Bool, keepRows: Int,
        scopes: [String: [ClosedRange<Int64>]], onRow: ((String, RowChange) throws -> Void)?
    ) throws -> DatabaseDiff {
        let names = try selected(tables)
        var result = DatabaseDiff(path: path, presence: .both, tables: [], schemaChanges: schemaChanges(in: names))
        for name in names {
            var kept = 0
            let listing = onRow != nil || keepRows > 0
            let table = try compareTable(name, filter: filter, scope: scopes[name], listing: listing) { change, diff in
                if kept < keepRows {
                    diff.rows.append(change)
                    kept += 1
                }
                try onRow?(name, change)
            }
            if includeUnchanged || table.hasChanges || table.presence != .both { result.tables.append(table) }
        }
        return result
    }

    /// `tables`, checked, or every table.
    func selected(_ tables: [String]) throws -> [String] {
        let all = tableNames
        guard !tables.isEmpty else { return all }
        for name in tables where !all.contains(name) {
            throw StoreBackupError.diffRefused(
                reason: "no table named \"\(name)\" on either side (tables: \(all.joined(separator: ", ")))")
        }
        return tables
    }

    /// What names rows of `name` on both sides: the same key on both, or the rowid when
    /// both are rowid tables; nil when nothing does (compare whole).
    func sharedKey(_ old: RowDiffSchema.Table, _ new: RowDiffSchema.Table) -> RowDiffSchema.Key? {
        if old.key == new.key, old.key != .none { return old.key }
        if !old.withoutRowid, !new.withoutRowid, let alias = old.rowidName, alias == new.rowidName {
            return .rowid(alias)
        }
        return nil
    }

    /// `columns`, quoted, whose storage class is compared too: those either side can hold
    /// as an integer or a real of equal value.
    static func typeChecked(_ columns: [String], _ old: RowDiffSchema.Table, _ new: RowDiffSchema.Table) -> Set<String> {
        let mixed = old.mixedTypes.union(new.mixedTypes)
        return Set(columns.filter { mixed.contains($0.lowercased()) }.map(RowDiffSQL.identifier))
    }

    /// The key expressions of `key` and their names.
    static func keyExpressions(_ key: RowDiffSchema.Key) -> (expressions: [String], names: [String]) {
        switch key {
        case .columns(let columns): (columns.map(RowDiffSQL.identifier), columns)
        case .rowid(let alias): ([alias], [alias])
        case .none: ([], [])
        }
    }

    private func compareTable(
        _ name: String, filter: String?, scope: [ClosedRange<Int64>]?, listing: Bool,
        _ found: (RowChange, inout TableDiff) throws -> Void
    ) throws -> TableDiff {
        let quotedName = RowDiffSQL.identifier(name)
        let old = older.tables[name], new = newer.tables[name]
        var diff = TableDiff(
            name: name, presence: .both, comparison: .notCompared, keyColumns: [], columns: [], inserted: 0, deleted: 0,
            changed: 0, rows: [], note: nil)
        guard let old, let new else {
            // On one side only: every row of it is inserted or deleted.
            let side = (old ?? new)!
            diff.presence = old == nil ? .added : .removed
            diff.columns = side.columns
            guard side.holdsRows else {
                diff.note = "a \(side.type)"
                return diff
            }
            let schema = old == nil ? RowDiffConnection.newer : RowDiffConnection.older
            let (keys, keyNames) = Self.keyExpressions(side.key)
            diff.keyColumns = keyNames
            let query = RowDiffQueries.all(
                schema: schema, table: quotedName, keys: keys, columns: side.columns.map(RowDiffSQL.identifier), filter: filter)
            let kind: RowChange.Kind = old == nil ? .inserted : .deleted
            let count = try stream(query, listing: listing, keyCount: keys.count) { key, values in
                let change = RowChange(
                    kind: kind, key: key, keyColumns: keyNames, before: kind == .deleted ? values : nil,
                    after: kind == .inserted ? values : nil,
                    columns: side.columns)
                try found(change, &diff)
            }
            if kind == .inserted { diff.inserted = count } else { diff.deleted = count }
            return diff
        }
        guard old.holdsRows, new.holdsRows else {
            diff.note = old.type == "virtual" ? "a virtual table: its shadow tables are compared" : "a \(old.type)"
            return diff
        }
        let lowered = Set(new.columns.map { $0.lowercased() })
        let common = old.columns.filter { lowered.contains($0.lowercased()) }
        diff.columns = common
        let key = sharedKey(old, new)
        let (keys, keyNames) = key.map(Self.keyExpressions) ?? ([], [])
        var queries = RowDiffQueries(
            table: quotedName, keys: keys, olderColumns: old.columns.map(RowDiffSQL.identifier),
            newerColumns: new.columns.map(RowDiffSQL.identifier), commonColumns: common.map(RowDiffSQL.identifier),
            typeChecked: Self.typeChecked(common, old, new), filter: filter)
        // The same rows on both sides: nothing to read.
        let same = scope?.isEmpty == true
        guard key != nil else {
            diff.comparison = .whole
            diff.note =
                old.key == .none || new.key == .none
                ? "no primary key and no usable rowid: compared whole" : "the key differs between the two sides: compared whole"
            if same { return diff }
            diff.deleted = try stream(queries.wholeDeleted, listing: listing, keyCount: 0) { _, values in
                try found(RowChange(kind: .deleted, key: [], keyColumns: [], before: values, after: nil, columns: common), &diff)
            }
            diff.inserted = try stream(queries.wholeInserted, listing: listing, keyCount: 0) { _, values in
                try found(RowChange(kind: .inserted, key: [], keyColumns: [], before: nil, after: values, columns: common), &diff)
            }
            return diff
        }
        if case .rowid = key { diff.comparison = .rowid } else { diff.comparison = .primaryKey }
        diff.keyColumns = keyNames
        if case .rowid = key, old.key != key || new.key != key {
            diff.note = "the primary key holds NULL: matched by rowid"
        }
        if same { return diff }
        if let scope, let rowid = old.rowidName, rowid == new.rowidName, !old.withoutRowid, !new.withoutRowid {
            try connection.setScope(scope)
            queries.scopeRowid = rowid
        }
        let counting = !listing && filter == nil
        // Counting between fixed sides: the inserted rows on another thread meanwhile.
        let inserting = counting && sidesAreFixed ? countElsewhere(queries.inserted, scope: queries.scopeRowid == nil ? nil : scope) : nil
        defer { inserting?.wait() }
        if counting {
            // One scan of the older side for both counts.
            let counts = try connection.rows(queries.deletedAndChangedCounts).first ?? []
            guard counts.count == 2, let deleted = counts[0].flatMap({ Int($0) }), let changed = counts[1].flatMap({ Int($0) }) else {
                throw StoreBackupError.sqlite(path: "diff", operation: "count rows of \(name)", message: "no counts")
            }
            (diff.deleted, diff.changed) = (deleted, changed)
        } else {
            diff.deleted = try stream(queries.deleted, listing: listing, keyCount: keys.count) { key, values in
                try found(
                    RowChange(kind: .deleted, key: key, keyColumns: keyNames, before: values, after: nil, columns: old.columns), &diff)
            }
            diff.changed = try stream(queries.changed, listing: listing, keyCount: keys.count) { key, values in
                let before = stride(from: 0, to: values.count, by: 2).map { values[$0] }
                let after = stride(from: 1, to: values.count, by: 2).map { values[$0] }
                try found(RowChange(kind: .changed, key: key, keyColumns: keyNames, before: before, after: after, columns: common), &diff)
            }
        }
        diff.inserted =
            try inserting?.value()
            ?? stream(queries.inserted, listing: listing, keyCount: keys.count) { key, values in
                try found(
                    RowChange(kind: .inserted, key: key, keyColumns: keyNames, before: nil, after: values, columns: new.columns), &diff)
            }
        return diff
    }

    /// Counts the rows of `query` on a connection and a thread of their own, with
    /// ``RowDiffConnection/scope`` holding `scope` there when the query reads in scope.
    private func countElsewhere(_ query: String, scope: [ClosedRange<Int64>]?) -> BackgroundResult<Int> {
        let (locations, cancel) = (locations, cancel)
        return BackgroundResult(name: "storebackup-diff-count") {
            let other = try RowDiffConnection(older: locations.older, newer: locations.newer, cancel: cancel)
            defer { other.close() }
            if let scope { try other.setScope(scope) }
            return Int(try other.scalar(RowDiffQueries.count(query)) ?? "0") ?? 0
        }
    }

    /// Runs `query` and hands each row on as (key literals, value literals); only counts
    /// (with SQLite's `count(*)`, nothing crossing into Swift) unless `listing`.
    private func stream(
        _ query: String, listing: Bool, keyCount: Int, _ row: ([String], [String]) throws -> Void
    ) throws -> Int {
        guard listing else { return Int(try connection.scalar(RowDiffQueries.count(query)) ?? "0") ?? 0 }
        var count = 0
        try connection.each(query) { columns in
            let literals = columns.map(RowDiffSQL.literal)
            try row(Array(literals[..<keyCount]), Array(literals[keyCount...]))
            count += 1
        }
        return count
    }

    /// Objects added, removed or redefined, for the selected tables (a view counts as its
    /// own table), sorted by type and name.
    func schemaChanges(in tables: [String]) -> [SchemaChange] {
        let selected = Set(tables)
        var changes: [SchemaChange] = []
        for name in Set(older.objects.keys).union(newer.objects.keys) {
            let old = older.objects[name], new = newer.objects[name]
            let object = (old ?? new)!
            guard selected.contains(object.table) || selected.contains(object.name) else { continue }
            let kind: SchemaChange.Kind
            switch (old, new) {
            case (nil, _): kind = .added
            case (_, nil): kind = .removed
            case (let old?, let new?):
                guard old.sql != new.sql || old.type != new.type else { continue }
                kind = .changed
            }
            changes.append(
                SchemaChange(kind: kind, type: object.type, name: name, table: object.table, before: old?.sql, after: new?.sql))
        }
        return changes.sorted { ($0.type, $0.name) < ($1.type, $1.name) }
    }
}
