import Crypto
import Foundation

/// Builds one database of a delta restore, block by block on several threads: a 1 MiB block
/// is taken from the live database when its SHA-256 is the one the manifest lists for that
/// block (format 4's `deflateBlockHashes`), else read from the backup (``EntryBlockReader``:
/// only that block's compressed bytes, inflated and checked against the same hash). Every
/// block written is thus one the manifest names; the whole file's SHA-256 is still checked
/// afterwards, since only it ties the bytes to a database proof. An `integrity_check` may
/// follow the blocks written so far from the start of the file (``UnpackingDatabase``).
struct DeltaDatabase {
    let entry: ArchiveEntry
    let hashes: [RawSHA256]
    /// One reader of the backup's entry per thread.
    let readers: [EntryBlockReader]
    /// The live store's bytes at the same path; nil when there are none to reuse.
    let live: LiveDatabase?
    let cancel: CancellationFlag

    /// Writes the database into `descriptor` (a new, empty file; `path` names it in messages).
    func build(
        into descriptor: Int32, path: String, unpacking: UnpackingDatabase?, onBytes: @escaping @Sendable (Int64) -> Void
    ) throws -> DeltaStatistics {
        let size = entry.size
        let blockSize = readers[0].index.blockSize
        let hashes = self.hashes, live = self.live
        let free = Locked(readers)
        let frontier = Locked<(done: [Bool], prefix: Int)>(([Bool](repeating: false, count: hashes.count), 0))
        let counts = Locked(DeltaStatistics())
        try WorkerPool.forEach(Array(hashes.indices), name: "storebackup-delta", width: readers.count, cancel: cancel) {
            let reader = free.withLock { $0.removeLast() }
            let buffer = BlockBuffer(size: blockSize)
            return { number in
                let offset = Int64(number) * Int64(blockSize)
                let block = UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[0..<Int(min(Int64(blockSize), size - offset))])
                var reused = false
                if let live, try live.read(into: block, at: offset) {
                    var hasher = SHA256()
                    hasher.update(bufferPointer: UnsafeRawBufferPointer(block))
                    reused = RawSHA256(bytes: hasher.finalize()) == hashes[number]
                }
                if !reused { try reader.read(into: block, at: offset) }
                try FileSystem.write(descriptor, UnsafeRawBufferPointer(block), at: offset, path: path)
                counts.withLock {
                    if reused {
                        $0.blocksReused += 1
                        $0.bytesReused += Int64(block.count)
                    } else {
                        $0.blocksRead += 1
                    }
                }
                onBytes(Int64(block.count))
                // The check reads from the start: it may go as far as every block before it is in.
                let written = frontier.withLock { state -> Int64 in
                    state.done[number] = true
                    while state.prefix < state.done.count && state.done[state.prefix] { state.prefix += 1 }
                    return min(size, Int64(state.prefix) * Int64(blockSize))
                }
                unpacking?.advance(to: written)
            }
        }
        var result = counts.current
        result.bytesRead = readers.reduce(0) { $0 + $1.statistics.compressedBytes }
        return result
    }
}

/// One thread's block buffer, freed with the last closure that holds it.
private final class BlockBuffer: @unchecked Sendable {  // used by one thread at a time
    let bytes: UnsafeMutableRawBufferPointer
    init(size: Int) { bytes = .allocate(byteCount: size, alignment: 16) }
    deinit { bytes.deallocate() }
}
