extension RowDiffer {
    /// What the SQL does with one table to bring it back to the older side.
    private enum UndoAction {
        /// Same definition on both sides: delete, update and insert rows by key.
        case rows(RowDiffSchema.Key)
        /// Only on the newer side: drop it.
        case drop
        /// Only on the older side, or defined differently: (drop and) create it as it was,
        /// with all its rows, indexes and triggers.
        case rebuild(dropFirst: Bool)
        /// A virtual table defined the same on both sides: its shadow tables carry its data.
        case nothing
    }

    /// Writes, one statement per call, the SQL that brings the selected rows of the newer
    /// database (the live one) back to their state in the older (the backup), in one
    /// transaction: `BEGIN;`, deletes of rows that were not in the older database, updates
    /// of changed rows (only the columns that differ), inserts of rows that were deleted,
    /// `COMMIT;`.
    ///
    /// Rows are named by primary key (composite and WITHOUT ROWID keys included), else by
    /// rowid. Without a `filter`, the schema of the selected tables comes back too: a table
    /// that is only in the newer database is dropped, one only in the older or defined
    /// differently is recreated with all its rows, and indexes and triggers (and, for all
    /// tables, views) are dropped or recreated to match; for all tables, `sqlite_sequence`
    /// is rewritten as it was. Triggers of the live tables fire as the statements run, as
    /// with any write; foreign keys are checked at `COMMIT` (`PRAGMA defer_foreign_keys`).
    ///
    /// - Parameters:
    ///   - tables: The tables to bring back; empty for all.
    ///   - filter: Only rows for which this SQL expression holds on either side (`--where`).
    ///   - write: Receives each statement (or `--` comment line) in order.
    /// - Throws: ``StoreBackupError/diffRefused(reason:)``, before anything is written, for
    ///   a table whose rows no key names (no primary key and no usable rowid), a virtual
    ///   table defined differently, or a `filter` on a table that must be rebuilt.
    public func undoSQL(tables: [String] = [], filter: String? = nil, write: (String) throws -> Void) throws {
        let everything = tables.isEmpty
        let names = try selected(tables).filter { !(everything && $0 == "sqlite_sequence") }
        var actions: [(name: String, action: UndoAction)] = []
        for name in names { actions.append((name, try undoAction(name, filter: filter))) }
        let rebuilt = Set(actions.compactMap { if case .rebuild = $0.action { $0.name } else { nil } })
        let schemaToo = filter == nil
        let inScope = { (object: RowDiffSchema.Object) -> Bool in
            object.type == "view" ? everything : names.contains(object.table)
        }

        try write("BEGIN;")
        try write("PRAGMA defer_foreign_keys = ON;")
        // Objects the older side lacks or defines differently go first, so no trigger added
        // since fires on the statements below.
        if schemaToo {
            for object in newer.objects.values.sorted(by: { $0.name < $1.name })
            where object.type != "table" && inScope(object) && older.objects[object.name] != object {
                try write("DROP \(object.type.uppercased()) IF EXISTS \(RowDiffSQL.identifier(object.name));")
            }
        }
        for (name, action) in actions {
            let quoted = RowDiffSQL.identifier(name)
            switch action {
            case .nothing: continue
            case .drop: try write("DROP TABLE \(quoted);")
            case .rebuild(let dropFirst):
                let table = older.tables[name]!
                if dropFirst { try write("DROP TABLE \(quoted);") }
                try write(table.sql! + ";")
                try insertAll(table)
            case .rows(let key):
                try undoRows(name, key: key, filter: filter, write: write)
            }
        }
        if schemaToo {
            // Indexes before triggers: a trigger made last fires on none of the rows above.
            let order = ["index": 0, "view": 1, "trigger": 2]
            let wanted = older.objects.values.filter { object in
                object.type != "table" && inScope(object)
                    && (newer.objects[object.name] != object || rebuilt.contains(object.table))
            }
            for object in wanted.sorted(by: { (order[$0.type] ?? 3, $0.name) < (order[$1.type] ?? 3, $1.name) }) {
                try write(object.sql + ";")
            }
            let dropped = actions.contains { if case .drop = $0.action { true } else { false } }
            if everything { try undoSequence(force: !rebuilt.isEmpty || dropped, write: write) }
        }
        try write("COMMIT;")

        func insertAll(_ table: RowDiffSchema.Table) throws {
            let keys: [String] = if case .rowid(let alias) = table.key { [alias] } else { [] }
            let query = RowDiffQueries.all(
                schema: RowDiffConnection.older, table: RowDiffSQL.identifier(table.name), keys: keys,
                columns: table.columns.map(RowDiffSQL.identifier), filter: nil)
            let columns = (keys + table.columns.map(RowDiffSQL.identifier)).joined(separator: ", ")
            try connection.each(query) { values in
                let literals = values.map(RowDiffSQL.literal).joined(separator: ", ")
                try write("INSERT INTO \(RowDiffSQL.identifier(table.name))(\(columns)) VALUES(\(literals));")
            }
        }
    }

    private func undoAction(_ name: String, filter: String?) throws -> UndoAction {
        let old = older.tables[name], new = newer.tables[name]
        let rowsOnly = { (why: String) in
            StoreBackupError.diffRefused(
                reason:
                    "table \"\(name)\" \(why); --where selects rows only, so it cannot bring the table back (leave out --where to rebuild it)"
            )
        }
        guard let old else {
            if filter != nil { throw rowsOnly("is not in the backup") }
            return .drop
        }
        guard old.holdsRows else {
            if new?.sql == old.sql { return .nothing }
            throw StoreBackupError.diffRefused(
                reason: "\(old.type) \"\(name)\" is defined differently since the backup; extract the database to bring it back")
        }
        guard let new, new.sql == old.sql, new.type == old.type else {
            if filter != nil { throw rowsOnly(new == nil ? "was dropped since the backup" : "is defined differently since the backup") }
            return .rebuild(dropFirst: new != nil)
        }
        guard let key = sharedKey(old, new) else {
            throw StoreBackupError.diffRefused(
                reason:
                    "table \"\(name)\" has no primary key and no usable rowid, so no statement can name one of its rows; extract the database to bring it back"
            )
        }
        return .rows(key)
    }

    /// Deletes, updates, inserts for one table defined the same on both sides.
    private func undoRows(_ name: String, key: RowDiffSchema.Key, filter: String?, write: (String) throws -> Void) throws {
        let table = older.tables[name]!
        let quoted = RowDiffSQL.identifier(name)
        let (keys, _) = Self.keyExpressions(key)
        let columns = table.columns.map(RowDiffSQL.identifier)
        let queries = RowDiffQueries(
            table: quoted, keys: keys, olderColumns: columns, newerColumns: columns, commonColumns: columns,
            typeChecked: Self.typeChecked(table.columns, table, newer.tables[name]!), filter: filter)
        let match = { (literals: ArraySlice<String?>) -> String in
            zip(keys, literals).map { "\($0) = \(RowDiffSQL.literal($1))" }.joined(separator: " AND ")
        }
        // Deletes first, then updates, then inserts: a unique value a live row took over
        // is free again before the row that held it comes back.
        try connection.each(queries.inserted) { row in
            try write("DELETE FROM \(quoted) WHERE \(match(row[..<keys.count]));")
        }
        try connection.each(queries.changed) { row in
            var assignments: [String] = []
            for (index, column) in columns.enumerated() {
                let before = row[keys.count + 2 * index], after = row[keys.count + 2 * index + 1]
                if before != after { assignments.append("\(column) = \(RowDiffSQL.literal(before))") }
            }
            guard !assignments.isEmpty else { return }
            try write("UPDATE \(quoted) SET \(assignments.joined(separator: ", ")) WHERE \(match(row[..<keys.count]));")
        }
        let insertColumns: [String] = if case .rowid(let alias) = key { [alias] + columns } else { columns }
        try connection.each(queries.deleted) { row in
            // A rowid key is not a column: it goes in as the first value; a primary key is
            // among the columns already.
            let values: [String?] = if case .rowid = key { row } else { Array(row[keys.count...]) }
            try write(
                "INSERT INTO \(quoted)(\(insertColumns.joined(separator: ", "))) VALUES(\(values.map(RowDiffSQL.literal).joined(separator: ", ")));"
            )
        }
    }

    /// `sqlite_sequence` (AUTOINCREMENT's counters) rewritten as the older side had it, when
    /// it differs or tables were recreated (which rewrites it).
    private func undoSequence(force: Bool, write: (String) throws -> Void) throws {
        let inOlder = older.tables["sqlite_sequence"] != nil, inNewer = newer.tables["sqlite_sequence"] != nil
        guard inOlder || inNewer else { return }
        var differs = force || inOlder != inNewer
        if !differs {
            let difference = "SELECT name, seq FROM a.sqlite_sequence EXCEPT SELECT name, seq FROM b.sqlite_sequence"
            let reverse = "SELECT name, seq FROM b.sqlite_sequence EXCEPT SELECT name, seq FROM a.sqlite_sequence"
            differs = try connection.scalar("SELECT EXISTS (\(difference)) OR EXISTS (\(reverse))") == "1"
        }
        guard differs else { return }
        try write("DELETE FROM sqlite_sequence;")
        guard inOlder else { return }
        try connection.each("SELECT quote(name), quote(seq) FROM a.sqlite_sequence") { row in
            try write("INSERT INTO sqlite_sequence(name, seq) VALUES(\(RowDiffSQL.literal(row[0])), \(RowDiffSQL.literal(row[1])));")
        }
    }
}
