import Crypto
import Foundation

/// Reads one database snapshot once, hashing every page (on the worker pool) and, when
/// asked, the whole file; writes the snapshot's complete page map, and, against the base's
/// map, the page delta and the map of changed pages.
struct DatabasePageScan {
    /// What the scan wrote and found.
    struct Result {
        /// Pages that differ from the base's map (or every page when there is none).
        var changedPages: Int
        /// The whole snapshot's SHA-256 (hex), when asked for.
        var sha256: String?
        /// Bytes of the page delta file, when one was written.
        var deltaSize: Int64?
        /// Bytes of the changed-pages map, when one was written.
        var changedMapSize: Int64?
    }

    /// Where a scan against a base writes.
    struct DeltaOutput {
        var base: PageMapFile
        var deltaPath: String
        var changedMapPath: String
    }

    let hasher: PageHasher
    let workers: Int
    let cancel: CancellationFlag

    /// Pages read and hashed per batch: a few MiB, whatever the page size.
    private static let batchBytes = 4 << 20

    /// Scans `snapshot`; writes its complete map to `mapPath`, and with `delta` the changed
    /// pages and their map. `wholeFileSHA256`: also hash the whole file (an incremental's
    /// database never goes through the compression pipeline, which would do it otherwise).
    func scan(
        _ snapshot: DatabaseSnapshot, mapPath: String, delta: DeltaOutput?, wholeFileSHA256: Bool
    ) throws -> Result {
        let pageSize = snapshot.pageSize
        let pages = snapshot.pageCount
        let map = try PageMapWriter(path: mapPath, kind: .complete, hash: hasher.kind, pageSize: pageSize, pages: pages)
        let deltaWriter = try delta.map { try PageDeltaWriter(path: $0.deltaPath, pageSize: pageSize, pages: pages) }
        let changedMap = try delta.map {
            try PageMapWriter(path: $0.changedMapPath, kind: .changedOnly, hash: hasher.kind, pageSize: pageSize, pages: pages)
        }
        let pagesPerBatch = max(1, Self.batchBytes / pageSize)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: pagesPerBatch * pageSize, alignment: 4096)
        defer { buffer.deallocate() }
        let hashes = UnsafeMutableRawBufferPointer.allocate(byteCount: pagesPerBatch * PageMapFormat.hashSize, alignment: 16)
        defer { hashes.deallocate() }
        var oldHashes: [UInt8] = []
        let fileHasher = RunningSHA256()
        var changed = 0
        let width = max(1, min(workers, WorkerPool.maximumWidth - 1))
        let pageHasher = self.hasher

        var first = 1
        while first <= pages {
            try cancel.throwIfCancelled()
            let count = min(pagesPerBatch, pages - first + 1)
            let bytes = count * pageSize
            let got = try snapshot.read(into: buffer.baseAddress!, count: bytes, offset: Int64(first - 1) * Int64(pageSize))
            guard got == bytes else {
                throw StoreBackupError.sqlite(path: snapshot.path, operation: "read snapshot", message: "short read")
            }
            // Pages are hashed on `width` threads, the whole file on one more, meanwhile.
            let batch = SendableBuffers(pages: UnsafeRawBufferPointer(buffer), hashes: hashes)
            try WorkerPool.run(name: "storebackup-pagehash", width: wholeFileSHA256 ? width + 1 : width) { worker in
                if worker == width {
                    fileHasher.hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: batch.pages.prefix(bytes)))
                    return
                }
                for index in stride(from: worker, to: count, by: width) {
                    let page = UnsafeRawBufferPointer(rebasing: batch.pages[(index * pageSize)..<((index + 1) * pageSize)])
                    let slot = UnsafeMutableRawBufferPointer(
                        rebasing: batch.hashes[(index * PageMapFormat.hashSize)..<((index + 1) * PageMapFormat.hashSize)])
                    pageHasher.hash(page, into: slot)
                }
            }

            let known = try delta?.base.readHashes(from: first, count: count, into: &oldHashes) ?? 0
            for index in 0..<count {
                let hash = UnsafeRawBufferPointer(
                    rebasing: hashes[(index * PageMapFormat.hashSize)..<((index + 1) * PageMapFormat.hashSize)])
                try map.add(page: first + index, hash: hash)
                let same =
                    index < known
                    && oldHashes.withUnsafeBytes {
                        memcmp($0.baseAddress! + index * PageMapFormat.hashSize, hash.baseAddress!, PageMapFormat.hashSize) == 0
                    }
                guard !same else { continue }
                changed += 1
                try deltaWriter?.add(
                    page: first + index,
                    bytes: UnsafeRawBufferPointer(rebasing: buffer[(index * pageSize)..<((index + 1) * pageSize)]))
                try changedMap?.add(page: first + index, hash: hash)
            }
            first += count
        }
        _ = try map.finish()
        return Result(
            changedPages: changed,
            sha256: wholeFileSHA256 ? FileDigest.hex(fileHasher.hasher.finalize()) : nil,
            deltaSize: try deltaWriter?.finish(),
            changedMapSize: try changedMap?.finish())
    }
}

/// A batch's buffers handed to the hashing threads, which each touch their own pages and
/// hash slots only; the batch outlives them (``WorkerPool/run(name:width:batch:_:)`` joins).
private struct SendableBuffers: @unchecked Sendable {
    let pages: UnsafeRawBufferPointer
    let hashes: UnsafeMutableRawBufferPointer
}

/// The whole file's running SHA-256, updated by one hashing thread per batch (the batches
/// one after another: each thread group is joined before the next starts).
private final class RunningSHA256: @unchecked Sendable {
    var hasher = SHA256()
}
