/// A set of page numbers (1-based, up to a page count) as one bit per page: a walk of a
/// large database's b-trees notes every page, and a `Set<Int>` of them would cost many
/// times the memory.
struct PageSet {
    private var words: [UInt64]
    let pageCount: Int

    init(pageCount: Int) {
        self.pageCount = pageCount
        words = [UInt64](repeating: 0, count: pageCount / 64 + 1)
    }

    func contains(_ page: Int) -> Bool {
        guard page >= 0, page <= pageCount else { return false }
        return words[page / 64] & (1 << UInt64(page % 64)) != 0
    }

    /// Adds `page` (within the page count); false when it was there already.
    @discardableResult
    mutating func insert(_ page: Int) -> Bool {
        precondition(page >= 0 && page <= pageCount, "page \(page) is beyond the page count \(pageCount)")
        let bit: UInt64 = 1 << UInt64(page % 64)
        guard words[page / 64] & bit == 0 else { return false }
        words[page / 64] |= bit
        return true
    }
}
