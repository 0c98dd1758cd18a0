/// One side's schema as a diff needs it: each table's columns and the key that names its
/// rows, and every schema object's SQL.
struct RowDiffSchema {
    /// How rows of one table are named on one side.
    enum Key: Equatable {
        /// Primary-key columns (a WITHOUT ROWID table's, or a rowid table's without NULLs).
        case columns([String])
        /// The rowid, under the first of its names no column shadows.
        case rowid(String)
        /// Nothing names a row: every rowid name is a column, or the table has no rows of its own.
        case none
    }

    struct Table {
        var name: String
        /// `table`, `shadow` (a virtual table's storage), `virtual` or `view`.
        var type: String
        var sql: String?
        /// The columns that hold stored values (generated and hidden columns are left out:
        /// they cannot be inserted, and follow from the others).
        var columns: [String]
        var key: Key
        var withoutRowid: Bool
        /// The first rowid name no column shadows (nil for WITHOUT ROWID tables too).
        var rowidName: String? = nil
        /// The columns (lowercased) that may hold an integer and a real of equal value: only
        /// BLOB affinity (no declared type) and STRICT's ANY keep a value's own type, every
        /// other affinity stores both alike. A diff compares storage classes only there,
        /// which costs more than the values.
        var mixedTypes: Set<String> = []
        /// Whether the table has data of its own to compare.
        var holdsRows: Bool { type == "table" || type == "shadow" }
    }

    struct Object: Equatable {
        var type: String
        var name: String
        var table: String
        var sql: String
    }

    /// Tables (and views, virtual tables) by name.
    var tables: [String: Table] = [:]
    /// Every object with SQL, by name (indexes SQLite makes for a constraint have none and
    /// follow their table's SQL).
    var objects: [String: Object] = [:]

    /// The tables and objects of the side attached as `schema`. SQLite's statistics
    /// (`sqlite_stat1`…) are left out: ANALYZE rewrites them, they describe no data.
    static func read(_ connection: RowDiffConnection, schema: String) throws -> RowDiffSchema {
        var result = RowDiffSchema()
        try connection.each("SELECT type, name, tbl_name, sql FROM \(schema).sqlite_schema WHERE sql IS NOT NULL") { row in
            guard let type = row[0], let name = row[1], let sql = row[3], !isStatistics(name) else { return }
            result.objects[name] = Object(type: type, name: name, table: row[2] ?? name, sql: sql)
        }
        let listed = try connection.rows("SELECT name, type, wr FROM pragma_table_list WHERE schema = ?1", [schema])
        for row in listed {
            guard let name = row[0], let type = row[1] else { continue }
            if name == "sqlite_schema" || name == "sqlite_temp_schema" || isStatistics(name) { continue }
            var table = Table(
                name: name, type: type, sql: result.objects[name]?.sql, columns: [], key: .none, withoutRowid: row[2] == "1")
            guard table.holdsRows else {
                result.tables[name] = table
                continue
            }
            var all: [String] = []
            var primary: [(order: Int, name: String)] = []
            try connection.each("SELECT name, pk, hidden, type FROM pragma_table_xinfo(?1, ?2)", [name, schema]) { column in
                guard let columnName = column[0] else { return }
                all.append(columnName)
                if keepsOwnType(declared: column[3] ?? "") { table.mixedTypes.insert(columnName.lowercased()) }
                if column[2] == "0" { table.columns.append(columnName) }
                if let order = Int(column[1] ?? "0"), order > 0 { primary.append((order, columnName)) }
            }
            let keyColumns = primary.sorted { $0.order < $1.order }.map(\.name)
            let rowidName = ["rowid", "_rowid_", "oid"].first { alias in !all.contains { $0.lowercased() == alias } }
            table.rowidName = table.withoutRowid ? nil : rowidName
            if table.withoutRowid {
                table.key = .columns(keyColumns)
            } else if !keyColumns.isEmpty, try !holdsNull(connection, schema: schema, table: name, columns: keyColumns) {
                table.key = .columns(keyColumns)
            } else if let rowidName {
                table.key = .rowid(rowidName)
            }
            result.tables[name] = table
        }
        return result
    }

    /// SQLite's affinity rules, in their order: INT, then CHAR/CLOB/TEXT, then BLOB or no
    /// type; ANY is NUMERIC except in a STRICT table, where it keeps every value as given.
    static func keepsOwnType(declared: String) -> Bool {
        let type = declared.uppercased()
        if type.contains("INT") || type.contains("CHAR") || type.contains("CLOB") || type.contains("TEXT") { return false }
        return type.isEmpty || type.contains("BLOB") || type == "ANY"
    }

    static func isStatistics(_ name: String) -> Bool {
        name.lowercased().hasPrefix("sqlite_stat")
    }

    /// A rowid table's primary key may hold NULLs (an old SQLite quirk kept for
    /// compatibility), and then it does not name one row: such a table is matched by rowid.
    /// An `INTEGER PRIMARY KEY` is the rowid itself and never NULL; any other key has its
    /// own index (origin `pk`), through which the test is one seek, not a scan of the table.
    private static func holdsNull(_ connection: RowDiffConnection, schema: String, table: String, columns: [String]) throws
        -> Bool
    {
        let keyIndex = try connection.scalar("SELECT 1 FROM pragma_index_list(?1, ?2) WHERE origin = 'pk'", [table, schema])
        guard keyIndex != nil else { return false }
        let test = columns.map { "\(RowDiffSQL.identifier($0)) IS NULL" }.joined(separator: " OR ")
        return try connection.scalar("SELECT 1 FROM \(schema).\(RowDiffSQL.identifier(table)) WHERE \(test) LIMIT 1") != nil
    }
}
