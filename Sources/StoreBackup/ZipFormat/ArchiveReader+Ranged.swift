import CZip
import Foundation

extension ArchiveReader {
    /// For a remote archive (opened without `ZIP_CHECKCONS`, which would read every entry's
    /// local header, one request each): checks entry `index`'s local header as libzip's
    /// check would, before the entry is read. Its signature and name must be those of the
    /// central directory, and its data must end before the next entry starts (the overlap
    /// ``CentralDirectoryCheck`` rules out, now with the real length of the extra fields).
    /// Nothing to do for a file: libzip checked every entry when it opened it.
    func checkLocalHeader(index: UInt64) throws {
        guard let ranged else { return }
        var stat = zip_stat_t()
        guard let span = ranged.span(ofEntry: index), zip_stat_index(idleHandle, index, zip_flags_t(ZIP_FL_ENC_RAW), &stat) == 0,
            let rawName = stat.name
        else { throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(index) is unreadable") }
        let name = Array(UnsafeRawBufferPointer(start: rawName, count: strlen(rawName)))
        let header = try ranged.read(at: span.lowerBound, count: 30 + name.count)
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

    /// ``checkLocalHeader(index:)`` for each of `entries` (the ones about to be extracted).
    func checkLocalHeaders(of entries: [ArchiveEntry]) throws {
        for entry in entries { try checkLocalHeader(index: entry.index) }
    }

    /// For a remote archive: fetches the small `entries` (the links, which extract reads all
    /// of to check the tree, and the small files asked for) in few requests, merging
    /// neighbours less than ``mergeGap`` apart, and keeps them, so that reading them one by
    /// one costs no request each. At most ``maxPrefetchBytes`` are kept this way; the other
    /// entries are read on demand.
    func prefetch(_ entries: [ArchiveEntry]) throws {
        guard let ranged else { return }
        // Only entries that are small on the archive's own word (a hostile archive may call
        // anything a link): others are read on demand, within readSmallEntry's limit.
        let spans = entries.compactMap { ranged.span(ofEntry: $0.index) }.filter { $0.count <= Self.mergeGap }
            .sorted { $0.lowerBound < $1.lowerBound }
        var merged: [Range<Int64>] = []
        for span in spans {
            if let last = merged.last, span.lowerBound - last.upperBound < Self.mergeGap,
                span.upperBound - last.lowerBound <= RangedArchive.chunkBytes
            {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, span.upperBound)
            } else {
                merged.append(span)
            }
        }
        var kept: Int64 = 0
        for range in merged {
            kept += Int64(range.count)
            guard kept <= Self.maxPrefetchBytes else { break }
            try ranged.willRead(range)
        }
    }

    /// What extract reads of `entries` before anything else: the local header of each file
    /// and link about to be read (``checkLocalHeader(index:)``), after fetching the small ones
    /// together with every link of the archive (``prefetch(_:)``). Nothing for a file.
    func prepareToRead(_ entries: [ArchiveEntry]) throws {
        guard ranged != nil else { return }
        let read = entries.filter { $0.kind == .file || $0.kind == .symlink }
        try prefetch(read.filter { $0.kind == .file } + self.entries.filter { $0.kind == .symlink })
        try checkLocalHeaders(of: read)
    }

    /// Bytes between two small entries worth fetching to save a request.
    static let mergeGap: Int64 = 32 << 10
    /// The most bytes ``prefetch(_:)`` keeps.
    static let maxPrefetchBytes: Int64 = 16 << 20
}
