/// Walks the interior pages of one point's b-trees level by level, in page order (so each
/// block is inflated about once): per tree its leaves and the rowids each one's place
/// allows (handed on one by one), whether any of its pages changed, and every page a tree
/// or the freelist holds.
/// Leaves are never read: SQLite keeps every leaf of a b-tree at one depth, so one child
/// tells a level's kind.
struct BTreeWalk {
    let pageCount: Int
    /// Pages that may differ from the other point (and any beyond its page count).
    let changed: Set<Int>
    /// A page's bytes, by number (1-based).
    let read: (Int) throws -> [UInt8]
    /// Pages some tree or the freelist holds (a page held twice fails the walk).
    private(set) var accounted: PageSet

    init(pageCount: Int, changed: Set<Int>, read: @escaping (Int) throws -> [UInt8]) {
        self.pageCount = pageCount
        self.changed = changed
        self.read = read
        accounted = PageSet(pageCount: pageCount)
    }

    struct Found {
        /// Whether the tree is keyed by rowid (a table b-tree).
        var rowids: Bool
        /// Whether any page of the tree changed.
        var dirty: Bool
    }

    /// A leaf, or a page still to visit, with the keys its place in the tree allows: above
    /// `low`, up to `high` (nil: unbounded).
    struct Leaf {
        var page: Int
        var low: Int64?
        var high: Int64?

        /// The rowids it may hold; nil when none.
        var rowids: ClosedRange<Int64>? {
            if let low, low == Int64.max { return nil }
            let lower = low.map { $0 + 1 } ?? Int64.min, upper = high ?? Int64.max
            return lower <= upper ? lower...upper : nil
        }
    }

    /// The tree rooted at `root`, each of its leaves handed to `leaf` as it is found (with
    /// the rowids its place allows, in a table b-tree), so that no list of a large tree's
    /// leaves is kept; nil when a page is not what such a tree's page must be (some leaves
    /// may have been handed on by then).
    mutating func tree(root: Int, leaf visit: (Leaf) -> Void = { _ in }) throws -> Found? {
        guard (1...pageCount).contains(root), let rootType = BTreePage.type(try read(root), page: root) else { return nil }
        let rowids = rootType == BTreePage.tableLeaf || rootType == BTreePage.tableInterior
        let interior = rowids ? BTreePage.tableInterior : BTreePage.indexInterior
        let leaf = rowids ? BTreePage.tableLeaf : BTreePage.indexLeaf
        var dirty = false
        func reached(_ node: Leaf) -> Bool {
            guard accounted.insert(node.page) else { return false }
            dirty = dirty || changed.contains(node.page)
            visit(node)
            return true
        }
        let top = Leaf(page: root, low: nil, high: nil)
        if rootType == leaf { return reached(top) ? Found(rowids: rowids, dirty: dirty) : nil }
        var level = [top]
        var depth = 0
        while !level.isEmpty {
            depth += 1
            guard depth < 64 else { return nil }
            var next: [Leaf] = []
            // One child tells whether the level below is the leaves: all are at one depth.
            var childrenAreLeaves: Bool?
            for node in level.sorted(by: { $0.page < $1.page }) {
                guard accounted.insert(node.page),
                    let page = BTreePage.interior(try read(node.page), page: node.page, type: interior, rowids: rowids)
                else { return nil }
                dirty = dirty || changed.contains(node.page)
                var children: [Leaf] = []
                children.reserveCapacity(page.cells.count + 1)
                var low = node.low
                for cell in page.cells {
                    guard (1...pageCount).contains(cell.child) else { return nil }
                    children.append(Leaf(page: cell.child, low: low, high: cell.key))
                    if rowids { low = cell.key }
                }
                guard (1...pageCount).contains(page.rightmost) else { return nil }
                children.append(Leaf(page: page.rightmost, low: low, high: node.high))
                if childrenAreLeaves == nil {
                    let type = BTreePage.type(try read(children[0].page), page: children[0].page)
                    guard type == leaf || type == interior else { return nil }
                    childrenAreLeaves = type == leaf
                }
                if childrenAreLeaves == true {
                    for child in children { guard reached(child) else { return nil } }
                } else {
                    next += children
                }
            }
            level = next
        }
        return Found(rowids: rowids, dirty: dirty)
    }

    /// Notes the freelist's trunk and leaf pages; false when it is not a freelist.
    mutating func accountFreelist(_ header: [UInt8]) throws -> Bool {
        var trunk = Int(BTreePage.uint32(header, 32))
        var trunks = 0
        while trunk != 0 {
            guard (1...pageCount).contains(trunk), trunks < pageCount, accounted.insert(trunk) else { return false }
            let bytes = try read(trunk)
            let count = Int(BTreePage.uint32(bytes, 4))
            guard 8 + 4 * count <= bytes.count else { return false }
            for index in 0..<count {
                let leaf = Int(BTreePage.uint32(bytes, 8 + 4 * index))
                guard (1...pageCount).contains(leaf), accounted.insert(leaf) else { return false }
            }
            trunk = Int(BTreePage.uint32(bytes, 0))
            trunks += 1
        }
        return true
    }
}
