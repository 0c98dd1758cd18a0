import CZip
import Foundation

extension ArchiveReader {
    /// For a remote archive (opened without `ZIP_CHECKCONS`, which would read every entry's
    /// local header, one request each): checks entry `index`'s local header as libzip's
    /// check would, before the entry is read. Its signature and name must be those of the
    /// central directory, and its data must end before the next entry starts (the overlap
    /// ``CentralDirectoryCheck`` rules out, now with the real length of the extra fields).
    /// Nothing to do for a file: libzip checked every entry when it opened it.
    /// `exact`: fetch only the header's bytes when they are not at hand (an entry read later,
    /// perhaps much later); by default the entry's first chunk, read right after.
    func checkLocalHeader(index: UInt64, exact: Bool = false) throws {
        guard case .ranged(let ranged) = source else { return }
        var stat = zip_stat_t()
        let handle = try idleHandle
        guard let span = ranged.span(ofEntry: index), zip_stat_index(handle, index, zip_flags_t(ZIP_FL_ENC_RAW), &stat) == 0,
            let rawName = stat.name
        else { throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(index) is unreadable") }
        let name = Array(UnsafeRawBufferPointer(start: rawName, count: strlen(rawName)))
        let count = min(30 + name.count, Int(span.count))
        let header = try exact ? ranged.peek(at: span.lowerBound, count: count) : ranged.read(at: span.lowerBound, count: count)
        func le16(_ at: Int) -> Int64 { Int64(header[at]) | Int64(header[at + 1]) << 8 }
        guard header.count == 30 + name.count, le16(0) | le16(2) << 16 == 0x0403_4b50 else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(index) has no local header")
        }
        guard le16(26) == Int64(name.count), Array(header[30...]) == name else {
            throw StoreBackupError.corruptArchive(
                name: backupName, reason: "entry \(index)'s local header names another file than the central directory")
        }
        let dataEnd = span.lowerBound + 30 + le16(26) + le16(28) + Int64(clamping: stat.comp_size)
        guard dataEnd <= span.upperBound else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "two entries share the same bytes")
        }
    }

    /// For a remote archive: fetches the small `entries` (the links, which extract reads all
    /// of to check the tree, and the small files asked for) in few requests, merging
    /// neighbours less than ``mergeGap`` apart, and keeps them, so that reading them one by
    /// one costs no request each. At most ``maxPrefetchBytes`` are kept this way; the other
    /// entries are read on demand.
    func prefetch(_ entries: [ArchiveEntry]) throws {
        guard case .ranged(let ranged) = source else { return }
        for range in prefetchPlan(entries, in: ranged).ranges { try ranged.willRead(range) }
    }

    /// What extract reads before anything else, for a remote archive: the small files of
    /// `entries` and every link of the archive (``prefetch(_:)``), and the local header of
    /// each file and link of `entries` (``checkLocalHeader(index:exact:)``). Returns false,
    /// having fetched nothing, when downloading the whole archive would cost less: each
    /// request counted as ``requestCostBytes`` on top of the bytes it fetches (extracting
    /// most of a backup is a download). True for a file.
    func prepareToRead(_ entries: [ArchiveEntry]) throws -> Bool {
        guard case .ranged(let ranged) = source else { return true }
        let read = entries.filter { $0.kind == .file || $0.kind == .symlink }
        let links = self.entries.filter { $0.kind == .symlink }
        let plan = prefetchPlan(read.filter { $0.kind == .file } + links, in: ranged)
        var requests = Int64(plan.ranges.count)
        var bytes = plan.ranges.reduce(Int64(0)) { $0 + Int64($1.count) }
        for entry in read + links where !plan.covered.contains(entry.index) {
            let span = Int64(ranged.span(ofEntry: entry.index)?.count ?? 0)
            // Its header, then its data in chunks growing to the request limit.
            requests += 2 + span / ranged.maxFetchBytes
            bytes += span
        }
        guard bytes + requests * Self.requestCostBytes < ranged.size else { return false }
        for range in plan.ranges { try ranged.willRead(range) }
        for entry in read { try checkLocalHeader(index: entry.index, exact: true) }
        return true
    }

    /// Which ranges ``prefetch(_:)`` fetches for `entries`, and the entries they hold.
    private func prefetchPlan(_ entries: [ArchiveEntry], in ranged: RangedArchive) -> (ranges: [Range<Int64>], covered: Set<UInt64>) {
        // Only entries that are small on the archive's own word (a hostile archive may call
        // anything a link): others are read on demand, within readSmallEntry's limit.
        let spans = entries.compactMap { entry in ranged.span(ofEntry: entry.index).map { (entry.index, $0) } }
            .filter { $0.1.count <= Self.mergeGap }.sorted { $0.1.lowerBound < $1.1.lowerBound }
        var ranges: [Range<Int64>] = []
        var covered = Set<UInt64>()
        var total: Int64 = 0
        for (index, span) in spans {
            if let last = ranges.last, span.lowerBound - last.upperBound < Self.mergeGap,
                span.upperBound - last.lowerBound <= RangedArchive.chunkBytes
            {
                let merged = last.lowerBound..<max(last.upperBound, span.upperBound)
                guard total + Int64(merged.count - last.count) <= Self.maxPrefetchBytes else { break }
                total += Int64(merged.count - last.count)
                ranges[ranges.count - 1] = merged
            } else {
                guard total + Int64(span.count) <= Self.maxPrefetchBytes else { break }
                total += Int64(span.count)
                ranges.append(span)
            }
            covered.insert(index)
        }
        return (ranges, covered)
    }

    /// Bytes between two small entries worth fetching to save a request.
    static let mergeGap: Int64 = 32 << 10
    /// The most bytes ``prefetch(_:)`` keeps.
    static let maxPrefetchBytes: Int64 = 16 << 20
    /// What one request costs beside its bytes, in bytes: a round trip on a link of some
    /// 10 MB/s with 25 ms of latency.
    static let requestCostBytes: Int64 = 256 << 10
}
