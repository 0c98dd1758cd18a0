import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes the complete page map (kind 0) of a database file on this machine: every page
/// hashed with the chain's hasher, read a few pages at a time.
enum CompletePageMapBuilder {
    /// Hashes the `pages` pages of `pageSize` bytes of `database` (which must be exactly
    /// that long) into a new scratch map at `mapPath`; returns the map's size.
    static func write(
        of database: String, pageSize: Int, pages: Int, hasher: PageHasher, to mapPath: String, cancel: CancellationFlag
    ) throws -> Int64 {
        let descriptor = open(database, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: database, operation: "open", errno: errno) }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw StoreBackupError.io(path: database, operation: "stat", errno: errno) }
        guard Int64(info.st_size) == Int64(pages) * Int64(pageSize) else {
            throw StoreBackupError.unexpected(reason: "\(database) is not \(pages) pages of \(pageSize) bytes")
        }
        let map = try PageMapWriter(path: mapPath, kind: .complete, hash: hasher.kind, pageSize: pageSize, pages: pages, durable: false)
        let pagesPerRead = max(1, (1 << 20) / pageSize)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: pagesPerRead * pageSize, alignment: 16)
        defer { buffer.deallocate() }
        let hash = UnsafeMutableRawBufferPointer.allocate(byteCount: PageMapFormat.hashSize, alignment: 16)
        defer { hash.deallocate() }
        var page = 1
        while page <= pages {
            try cancel.throwIfCancelled()
            let count = min(pagesPerRead, pages - page + 1)
            let bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<(count * pageSize)])
            try PositionedRead.exactly(descriptor, into: bytes, at: Int64(page - 1) * Int64(pageSize), path: database)
            for index in 0..<count {
                hasher.hash(UnsafeRawBufferPointer(rebasing: bytes[(index * pageSize)..<((index + 1) * pageSize)]), into: hash)
                try map.add(page: page + index, hash: UnsafeRawBufferPointer(hash))
            }
            page += count
        }
        return try map.finish()
    }
}
