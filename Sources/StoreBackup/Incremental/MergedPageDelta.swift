import Foundation

/// Merges the page deltas of one database from consecutive backups of a chain, and their
/// maps of changed pages, into one delta and one map onto the base of the oldest: each
/// page from the newest delta holding it (as a chain restore takes it, ``PageDeltaMerge``),
/// records ascending, cut to the final page count. Every delta and map is streamed (one
/// record of each in memory) with every check of ``DeltaStream`` and
/// ``ChangedPageMapReader``, and each map must list exactly its delta's pages.
enum MergedPageDelta {
    /// One backup's delta and map of the database.
    struct Part {
        let delta: PageDeltaMerge.Delta
        let map: ArchiveEntry
        /// The database's page count in that backup.
        let pages: Int
    }

    /// What was written: each file's size.
    struct Written {
        let deltaSize: Int64
        let mapSize: Int64
    }

    /// Writes the merged delta to `deltaPath` and map to `mapPath` (new scratch files) for
    /// a database of `pages` pages of `pageSize` bytes after the newest part (`parts` oldest first).
    static func write(
        databasePath: String, pageSize: Int, pages: Int, hashKind: PageHashKind, parts: [Part], deltaPath: String,
        mapPath: String, cancel: CancellationFlag
    ) throws -> Written {
        let streams = try parts.map { part in
            (
                delta: try DeltaStream(part.delta, databasePath: databasePath, pageSize: pageSize),
                map: try ChangedPageMapReader(
                    reader: part.delta.reader, entry: part.map, databasePath: databasePath, pageSize: pageSize, pages: part.pages,
                    hashKind: hashKind),
                name: part.delta.reader.backupName
            )
        }
        func mismatch(_ name: String) -> StoreBackupError {
            .corruptArchive(name: name, reason: "the page map of \(databasePath) does not list the pages of its page delta")
        }
        for stream in streams where stream.delta.number != stream.map.number { throw mismatch(stream.name) }
        let delta = try PageDeltaWriter(path: deltaPath, pageSize: pageSize, pages: pages, durable: false)
        let map = try PageMapWriter(
            path: mapPath, kind: .changedOnly, hash: hashKind, pageSize: pageSize, pages: pages, durable: false)
        var written = 0
        while true {
            var lowest: Int?
            var newest = 0
            for (index, stream) in streams.enumerated() {
                guard let number = stream.delta.number, number <= (lowest ?? .max) else { continue }
                lowest = number
                newest = index
            }
            guard let number = lowest else { break }
            // A page a later backup cut away is not part of the final database.
            if number <= pages {
                try delta.add(page: number, bytes: UnsafeRawBufferPointer(rebasing: streams[newest].delta.page[0..<pageSize]))
                try map.add(page: number, hash: UnsafeRawBufferPointer(streams[newest].map.hash))
            }
            for stream in streams where stream.delta.number == number {
                try stream.delta.next()
                try stream.map.next()
                guard stream.delta.number == stream.map.number else { throw mismatch(stream.name) }
            }
            written += 1
            if written % 1024 == 0 { try cancel.throwIfCancelled() }
        }
        return Written(deltaSize: try delta.finish(), mapSize: try map.finish())
    }
}
