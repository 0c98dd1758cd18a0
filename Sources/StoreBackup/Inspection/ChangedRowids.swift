/// Which rows of each table can differ between two points of one incremental chain, from
/// the pages the page deltas between them write (docs/FORMAT.md, format 3): a diff then
/// compares only the rows in those rowid ranges, not every row of a large table.
///
/// Only interior b-tree pages are read, never a leaf: the newer point's, and the older
/// point's that changed (an unchanged page is the same bytes in both). A leaf page that is
/// unchanged and a leaf of the table in both points holds the same rows in both, so a row
/// that differs lies in a leaf that changed or is in one tree only; the rowids such a leaf
/// may hold lie between the divider keys of its place in its tree. A changed page that is
/// neither a b-tree page nor a freelist page of the newer point is an overflow page (or
/// something not modelled here): a row behind an unchanged leaf may have changed, so then
/// nothing is narrowed.
enum ChangedRowids {
    /// Per table that can be narrowed: the rowid ranges outside which both points hold the
    /// same rows (no range: the same rows throughout). A table not listed is compared in
    /// full (its root or SQL differs, or it is keyed by something else and a page of it
    /// changed). Nil when the two are not points of one chain, or the pages cannot tell.
    static func scopes(older: BackupDatabase, newer: BackupDatabase) throws -> [String: [ClosedRange<Int64>]]? {
        guard let changed = newer.pagesChanged(since: older) else { return nil }
        return try scopes(older: older, newer: newer, changed: changed)
    }

    /// ``scopes(older:newer:)`` for any two copies of a database of which `changed` holds
    /// every page (within both page counts) whose bytes may differ: from a chain's page
    /// deltas, or from comparing the two copies page by page (``ScratchCopies``).
    static func scopes(older: some ComparedDatabase, newer: some ComparedDatabase, changed: Set<Int>) throws -> [String:
        [ClosedRange<Int64>]]?
    {
        var changed = changed
        guard newer.size >= 100, older.size >= 100 else { return nil }
        let header = try newer.bytes(at: 0, count: 100)
        let declared = Int(header[16]) << 8 | Int(header[17])
        let pageSize = declared == 1 ? 65536 : declared
        // Auto-vacuum's pointer-map pages are not modelled.
        guard pageSize >= 512, pageSize.nonzeroBitCount == 1, BTreePage.uint32(header, 52) == 0 else { return nil }
        let newerPages = Int(newer.size / Int64(pageSize)), olderPages = Int(older.size / Int64(pageSize))
        // Pages on one side only differ too (a delta writes none beyond its own count).
        for page in min(newerPages, olderPages) + 1..<max(newerPages, olderPages) + 1 { changed.insert(page) }
        let shared = SharedPages(database: newer, pageSize: pageSize, changed: changed)
        var newerWalk = BTreeWalk(pageCount: newerPages, changed: changed, read: shared.read)
        let olderRead = { (page: Int) in
            changed.contains(page) ? try older.bytes(at: Int64(page - 1) * Int64(pageSize), count: pageSize) : try shared.read(page)
        }
        var olderWalk = BTreeWalk(pageCount: olderPages, changed: changed, read: olderRead)
        let olderTrees = try trees(of: older), newerTrees = try trees(of: newer)
        guard try newerWalk.tree(root: 1) != nil else { return nil }
        var found: [String: BTreeWalk.Found] = [:]
        for (name, tree) in newerTrees.sorted(by: { $0.value.root < $1.value.root }) {
            guard let tree = try newerWalk.tree(root: tree.root) else { return nil }
            found[name] = tree
        }
        guard try newerWalk.accountFreelist(header) else { return nil }
        // A changed page no tree or freelist holds: an overflow page, say.
        for page in changed where page <= newerPages && !newerWalk.accounted.contains(page) { return nil }

        var scopes: [String: [ClosedRange<Int64>]] = [:]
        for (name, tree) in newerTrees where tree.isTable && olderTrees[name] == tree {
            guard let newerTree = found[name] else { continue }
            guard newerTree.dirty else {
                scopes[name] = []
                continue
            }
            guard newerTree.rowids else { continue }
            // Leaves are handed on one by one, never listed (a large table has hundreds of
            // thousands): the older tree's unchanged leaves, then those of the newer tree that
            // are also the older's, then the older's that are not; every other leaf's range is
            // in scope. The second and third walks read interior pages kept or changed.
            var suspects: [ClosedRange<Int64>] = []
            var olderUnchanged = PageSet(pageCount: olderPages)
            let olderTree = try olderWalk.tree(root: tree.root) { leaf in
                if changed.contains(leaf.page) {
                    if let rowids = leaf.rowids { suspects.append(rowids) }
                } else {
                    olderUnchanged.insert(leaf.page)
                }
            }
            guard let olderTree, olderTree.rowids else { continue }
            var inBoth = PageSet(pageCount: olderPages)
            var newerAgain = BTreeWalk(pageCount: newerPages, changed: changed, read: shared.read)
            let newerWalked = try newerAgain.tree(root: tree.root) { leaf in
                if !changed.contains(leaf.page) && olderUnchanged.contains(leaf.page) {
                    inBoth.insert(leaf.page)
                } else if let rowids = leaf.rowids {
                    suspects.append(rowids)
                }
            }
            var olderAgain = BTreeWalk(pageCount: olderPages, changed: changed, read: olderRead)
            let olderWalked = try olderAgain.tree(root: tree.root) { leaf in
                if !changed.contains(leaf.page) && !inBoth.contains(leaf.page), let rowids = leaf.rowids { suspects.append(rowids) }
            }
            guard newerWalked != nil, olderWalked != nil else { continue }
            scopes[name] = merged(suspects)
        }
        return scopes
    }

    /// Pages that are the same in both points, read from the newer one; table b-trees'
    /// interior pages are kept, for the older point's walk reads them again.
    private final class SharedPages<Database: ComparedDatabase> {
        let database: Database
        let pageSize: Int
        let changed: Set<Int>
        private var kept: [Int: [UInt8]] = [:]

        init(database: Database, pageSize: Int, changed: Set<Int>) {
            self.database = database
            self.pageSize = pageSize
            self.changed = changed
        }

        func read(_ page: Int) throws -> [UInt8] {
            if let bytes = kept[page] { return bytes }
            let bytes = try database.bytes(at: Int64(page - 1) * Int64(pageSize), count: pageSize)
            let type = BTreePage.type(bytes, page: page)
            // Only the older point's table trees are walked again.
            if !changed.contains(page) && type == BTreePage.tableInterior { kept[page] = bytes }
            return bytes
        }
    }

    private struct Tree: Equatable {
        var root: Int
        var isTable: Bool
        var sql: String?
    }

    /// Every b-tree of one point by name (tables and indexes; not `sqlite_schema`).
    private static func trees(of database: some ComparedDatabase) throws -> [String: Tree] {
        var trees: [String: Tree] = [:]
        for row in try database.schemaRows("SELECT type, name, rootpage, sql FROM sqlite_schema WHERE rootpage > 0") {
            guard case .text(let type) = row[0], case .text(let name) = row[1], case .integer(let root) = row[2] else { continue }
            let sql: String? = if case .text(let text) = row[3] { text } else { nil }
            trees[name] = Tree(root: Int(root), isTable: type == "table", sql: sql)
        }
        return trees
    }

    /// `ranges` sorted, overlapping and adjacent ones joined.
    static func merged(_ ranges: [ClosedRange<Int64>]) -> [ClosedRange<Int64>] {
        var result: [ClosedRange<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, last.upperBound == Int64.max || range.lowerBound <= last.upperBound + 1 {
                result[result.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                result.append(range)
            }
        }
        return result
    }
}
