/// The three queries that compare one table across the two attached sides, keyed, and the
/// two that compare it whole.
///
/// Every query walks one side in its own order and looks each row's key up on the other
/// side through that side's key index (a b-tree seek, in key order, so the pages it reads
/// are mostly cached), as `sqldiff` does: rows stream, nothing is sorted or collected. Key
/// equality uses the key columns' own collation, as the table's uniqueness does; values are
/// compared exactly (`IS NOT … COLLATE BINARY`, and the storage class where a column can
/// hold both `1` and `1.0`, so those differ, as do `'a'` and `'A'` under NOCASE).
struct RowDiffQueries {
    /// The table, quoted.
    let table: String
    /// Key expressions (quoted columns, or a rowid name), empty to compare whole.
    let keys: [String]
    /// The columns on the older and the newer side, quoted.
    let olderColumns: [String]
    let newerColumns: [String]
    /// The columns on both sides, quoted (compared for changed rows).
    let commonColumns: [String]
    /// Those of `commonColumns` whose storage class is compared too (see
    /// ``RowDiffSchema/Table/mixedTypes``).
    var typeChecked: Set<String> = []
    /// `--where`: a boolean expression over the table's columns; nil for every row.
    let filter: String?
    /// A rowid name: the scanned side reads only the rowid ranges in
    /// ``RowDiffConnection/scope`` (rows outside them are the same on both sides); nil for
    /// every row. Only for keyed comparisons: a set difference needs every row.
    var scopeRowid: String? = nil

    private static let older = RowDiffConnection.older
    private static let newer = RowDiffConnection.newer
    private static let olderRow = "storebackup_older_row"
    private static let newerRow = "storebackup_newer_row"

    private func keyMatch(_ left: String, _ right: String) -> String {
        keys.map { "\(left).\($0) = \(right).\($0)" }.joined(separator: " AND ")
    }

    private func quoted(_ prefix: String, _ columns: [String]) -> [String] {
        columns.map { "quote(\(prefix).\($0))" }
    }

    /// Rows of `schema` whose key the other side lacks: key literals, then every column.
    /// The scanned table has no alias, so `--where`'s bare column names are its own.
    private func onlyIn(_ schema: String, other: String, columns: [String]) -> String {
        let selected = (quoted(table, keys) + quoted(table, columns)).joined(separator: ", ")
        let absent = "NOT EXISTS (SELECT 1 FROM \(other).\(table) AS \(Self.olderRow) WHERE \(keyMatch(Self.olderRow, table)))"
        let condition = inScope(table) + (filter.map { "(\($0)) AND \(absent)" } ?? absent)
        return "SELECT \(selected) FROM \(scanned("\(schema).\(table)")) WHERE \(condition)"
    }

    /// The scanned table, after the scope's ranges when scoped: CROSS JOIN keeps the
    /// ranges outside, so each is one seek into the table's rowid b-tree.
    private func scanned(_ from: String) -> String {
        scopeRowid == nil ? from : "\(RowDiffConnection.scope) CROSS JOIN \(from)"
    }

    /// The scope's condition on the scanned table (named `alias`), with a trailing AND.
    private func inScope(_ alias: String) -> String {
        scopeRowid.map { "\(alias).\($0) BETWEEN storebackup_low AND storebackup_high AND " } ?? ""
    }

    /// Rows only in the older side (deleted), with the older side's columns.
    var deleted: String { onlyIn(Self.older, other: Self.newer, columns: olderColumns) }
    /// Rows only in the newer side (inserted), with the newer side's columns.
    var inserted: String { onlyIn(Self.newer, other: Self.older, columns: newerColumns) }

    /// Whether the older and the newer row (aliased `storebackup_older_row` and
    /// `storebackup_newer_row`) differ in a common column.
    private var rowsDiffer: String {
        let (old, new) = (Self.olderRow, Self.newerRow)
        let differs = commonColumns.map { column in
            let value = "\(old).\(column) IS NOT \(new).\(column) COLLATE BINARY"
            guard typeChecked.contains(column) else { return value }
            return value + " OR typeof(\(old).\(column)) IS NOT typeof(\(new).\(column))"
        }
        return "(" + (differs.isEmpty ? "0" : differs.joined(separator: " OR ")) + ")"
    }

    /// Rows on both sides whose common columns differ: the newer key literals, then for
    /// each common column its older and newer literal.
    var changed: String {
        let (old, new) = (Self.olderRow, Self.newerRow)
        var selected = quoted(new, keys)
        for column in commonColumns { selected += ["quote(\(old).\(column))", "quote(\(new).\(column))"] }
        var condition = inScope(old) + rowsDiffer
        if let filter {
            // The row is selected when either side's version matches; each EXISTS scans an
            // unaliased table, so the filter's bare names are that side's columns.
            let either = [(Self.older, old), (Self.newer, new)].map { schema, alias in
                "EXISTS (SELECT 1 FROM \(schema).\(table) WHERE \(keyMatch(table, alias)) AND (\(filter)))"
            }
            condition += " AND (\(either.joined(separator: " OR ")))"
        }
        return "SELECT \(selected.joined(separator: ", ")) FROM \(scanned("\(Self.older).\(table) AS \(old)")) "
            + "JOIN \(Self.newer).\(table) AS \(new) ON \(keyMatch(new, old)) WHERE \(condition)"
    }

    /// The counts of ``deleted`` and ``changed`` rows (without a filter) from one scan of
    /// the older side: each row's key is looked up on the newer side once, not once for
    /// each count. A matched row's key is not NULL (`=` matched it), so a NULL key on the
    /// newer side means no row there.
    var deletedAndChangedCounts: String {
        let (old, new) = (Self.olderRow, Self.newerRow)
        let absent = "\(new).\(keys[0]) IS NULL"
        let scope = scopeRowid.map { " WHERE \(old).\($0) BETWEEN storebackup_low AND storebackup_high" } ?? ""
        return "SELECT count(*) FILTER (WHERE \(absent)), count(*) FILTER (WHERE NOT \(absent) AND \(rowsDiffer)) "
            + "FROM \(scanned("\(Self.older).\(table) AS \(old)")) LEFT JOIN \(Self.newer).\(table) AS \(new) "
            + "ON \(keyMatch(new, old))\(scope)"
    }

    /// Whole rows (the common columns) of `schema` that the other side lacks, as a set.
    private func wholeOnlyIn(_ schema: String, other: String) -> String {
        let list = commonColumns.joined(separator: ", ")
        let filtered = filter.map { " WHERE (\($0))" } ?? ""
        let difference =
            "SELECT \(list) FROM \(schema).\(table)\(filtered) EXCEPT SELECT \(list) FROM \(other).\(table)\(filtered)"
        return "SELECT \(commonColumns.map { "quote(\($0))" }.joined(separator: ", ")) FROM (\(difference))"
    }

    var wholeDeleted: String { wholeOnlyIn(Self.older, other: Self.newer) }
    var wholeInserted: String { wholeOnlyIn(Self.newer, other: Self.older) }

    /// Every row of `schema`'s table (a table on one side only, or one rebuilt): key
    /// literals, then `columns`.
    static func all(schema: String, table: String, keys: [String], columns: [String], filter: String?) -> String {
        let selected = (keys + columns).map { "quote(\(table).\($0))" }.joined(separator: ", ")
        return "SELECT \(selected) FROM \(schema).\(table)" + (filter.map { " WHERE (\($0))" } ?? "")
    }

    /// `SELECT count(*)` of a query.
    static func count(_ query: String) -> String { "SELECT count(*) FROM (\(query))" }
}
