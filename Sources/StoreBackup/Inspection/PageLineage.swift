/// Where a point of a chain takes a database's pages from: the backups from this point down
/// to the one that stores the database whole, newest first, with the pages each one's page
/// delta writes (none where the database did not change). Two points of one chain share
/// the tail of their lineages, and a page that no delta between them writes is the same in
/// both: it comes from the same delta or the same whole entry.
struct PageLineage: Sendable, Equatable {
    /// Backup names, newest first; the last stores the database whole.
    var backups: [String]
    /// For every backup but the last, the page numbers its page delta writes.
    var writtenPages: [String: [UInt32]]

    /// The pages that may differ between `older` and this point: those written by the
    /// page deltas above it. Nil unless `older` is a point below this one on this lineage.
    func pagesChanged(since older: PageLineage) -> Set<Int>? {
        guard let start = older.backups.first, let below = backups.firstIndex(of: start),
            Array(backups[below...]) == older.backups
        else { return nil }
        var pages = Set<Int>()
        for name in backups[..<below] {
            guard let written = writtenPages[name] else { return nil }
            for page in written { pages.insert(Int(page)) }
        }
        return pages
    }
}
