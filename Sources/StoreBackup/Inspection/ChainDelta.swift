import Foundation

/// One page delta of a chain as the backup VFS reads it: the pages it writes, ascending
/// (record `i` writes `pages[i]`), and where each record's bytes are.
struct ChainDelta: Sendable {
    enum Records: Sendable {
        /// In the delta's own blocks (a delta the manifest's `pageDeltas` lists with its block
        /// hashes): record `i` is at ``recordOffset(_:pageSize:)`` of the inflated delta, read
        /// from the one block (or two) holding it, each checked against its hash.
        case blocks(EntryBlockReader)
        /// Copied into the chain's scratch file when opened (a delta read whole): record `i`'s
        /// page at `start` + `i` × page size.
        case scratch(start: Int64)
    }

    /// The backup whose archive holds the delta.
    let backupName: String
    let pages: [UInt32]
    let records: Records

    /// Where record `index` (its page number, then the page) starts in the inflated delta.
    static func recordOffset(_ index: Int, pageSize: Int) -> Int64 {
        Int64(PageDeltaReader.headerSize) + Int64(index) * Int64(4 + pageSize)
    }

    /// The same delta, its blocks read through a sibling reader that keeps them in `cache`
    /// (one per thread).
    func sibling(cache: InflatedBlockCache) -> ChainDelta {
        guard case .blocks(let reader) = records else { return self }
        return ChainDelta(backupName: backupName, pages: pages, records: .blocks(reader.sibling(shared: cache)))
    }

    /// The record of `page` at `index` (``pages``[`index`] is `page`): its bytes from `start`
    /// within the page into `buffer`. A record whose own page number is not `page` means the
    /// page map that indexed the delta does not list its pages: refused, never served.
    func copy(
        record index: Int, page: UInt32, from start: Int, into buffer: UnsafeMutableRawBufferPointer, pageSize: Int,
        scratch: ChainScratch, databasePath: String
    ) throws {
        switch records {
        case .scratch(let first):
            try scratch.read(into: buffer, at: first + Int64(index) * Int64(pageSize) + Int64(start))
        case .blocks(let reader):
            let offset = Self.recordOffset(index, pageSize: pageSize)
            var number: UInt32 = 0
            try withUnsafeMutableBytes(of: &number) { try reader.read(into: $0, at: offset) }
            guard UInt32(littleEndian: number) == page else {
                throw StoreBackupError.corruptArchive(
                    name: backupName,
                    reason: "the page map of \(databasePath) does not list the pages of its page delta "
                        + "(record \(index) is page \(UInt32(littleEndian: number)), the map says \(page))")
            }
            try reader.read(into: buffer, at: offset + 4 + Int64(start))
        }
    }
}
