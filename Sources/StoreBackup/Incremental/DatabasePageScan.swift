import Crypto
import Foundation

/// Reads one database snapshot once, hashing every page (on the worker pool; with a quick
/// map, only the pages whose quick value changed) and, when asked, the whole file; writes
/// the snapshot's complete page map (and quick map), and, against the base's map, the page
/// delta and the map of changed pages.
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
        /// Pages hashed with the page hasher; the others took the base's hash by their quick value.
        var pagesHashed: Int
    }

    /// The quick page map a scan writes (``QuickPageMap``), and the base's it may trust.
    struct QuickScan {
        /// The base's quick map and complete page map (same page size as the snapshot): a
        /// page whose quick value is the base's takes the base's hash without being hashed.
        /// Nil: every page is hashed.
        var base: (quick: QuickPageMapFile, map: PageMapFile)?
        var outputPath: String
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

    /// Pages read and hashed per batch: 1 MiB, whatever the page size (the ring is the
    /// largest buffer a scheduled run holds; larger batches scanned no faster).
    private static let batchBytes = 1 << 20
    /// Batches in flight: one being read, one being hashed, one being written.
    private static let ringSlots = 3

    /// Scans `snapshot`; writes its complete map to `mapPath`, and with `delta` the changed
    /// pages and their map. `wholeFileSHA256`: also hash the whole file (an incremental's
    /// database never goes through the compression pipeline, which would do it otherwise).
    /// `quick`: also write the quick map, and skip hashing the pages it shows unchanged.
    ///
    /// One thread reads the snapshot into a ring of batches, `workers` threads hash them
    /// (one of them the whole file, which is sequential, the others the pages), and this
    /// thread compares each batch's hashes with the base's and writes the delta.
    func scan(
        _ snapshot: DatabaseSnapshot, mapPath: String, delta: DeltaOutput?, wholeFileSHA256: Bool, quick: QuickScan? = nil
    ) throws -> Result {
        let pageSize = snapshot.pageSize
        let pages = snapshot.pageCount
        let map = try PageMapWriter(path: mapPath, kind: .complete, hash: hasher.kind, pageSize: pageSize, pages: pages)
        // The delta and its map are scratch files that only this run's archive reads back.
        let deltaWriter = try delta.map {
            try PageDeltaWriter(path: $0.deltaPath, pageSize: pageSize, pages: pages, durable: false)
        }
        let changedMap = try delta.map {
            try PageMapWriter(
                path: $0.changedMapPath, kind: .changedOnly, hash: hasher.kind, pageSize: pageSize, pages: pages, durable: false)
        }
        let pagesPerBatch = max(1, Self.batchBytes / pageSize)
        let batches = (pages + pagesPerBatch - 1) / pagesPerBatch
        // The whole-file hash takes one thread for itself; the pages share the others.
        let pageHashers = max(1, min(wholeFileSHA256 ? workers - 1 : workers, WorkerPool.maximumWidth - 2))
        let quickWriter = try quick.map { try QuickPageMapWriter(path: $0.outputPath, pageSize: pageSize, pages: pages) }
        let quickBase = quick?.base
        let ring = PageBatchRing(
            slots: Self.ringSlots, slotBytes: pagesPerBatch * pageSize, hashBytesPerSlot: pagesPerBatch * PageMapFormat.hashSize,
            quickBytesPerSlot: quick == nil ? 0 : pagesPerBatch * QuickPageMap.valueSize, pageHashers: pageHashers,
            hashesWholeFile: wholeFileSHA256)
        let fileHasher = RunningSHA256()
        let pageHasher = self.hasher
        let cancel = self.cancel
        let pagesHashed = Locked(0)
        let computesQuick = quick != nil
        @Sendable func pageCount(of batch: Int) -> Int { min(pagesPerBatch, pages - batch * pagesPerBatch) }

        let threads = WorkerPool.start(name: "storebackup-pagescan", width: 1 + (wholeFileSHA256 ? 1 : 0) + pageHashers) {
            worker in
            if worker == 0 {
                // The reader.
                do {
                    for batch in 0..<batches {
                        try cancel.throwIfCancelled()
                        guard ring.waitForFreeSlot(batch) else { return }
                        let bytes = pageCount(of: batch) * pageSize
                        let got = try snapshot.read(
                            into: ring.pages(of: batch).baseAddress!, count: bytes, offset: Int64(batch * pagesPerBatch) * Int64(pageSize))
                        guard got == bytes else {
                            throw StoreBackupError.sqlite(path: snapshot.path, operation: "read snapshot", message: "short read")
                        }
                        if let quickBase {
                            let first = batch * pagesPerBatch + 1
                            let slots = ring.base(of: batch)
                            let values = try quickBase.quick.readValues(from: first, count: pageCount(of: batch), into: slots.quick)
                            let hashes = try quickBase.map.readHashes(from: first, count: pageCount(of: batch), into: slots.hashes)
                            ring.setBaseKnown(batch, min(values, hashes))
                        }
                        ring.markRead(batch)
                    }
                } catch {
                    ring.stop(error)
                }
            } else if wholeFileSHA256 && worker == 1 {
                for batch in 0..<batches {
                    guard ring.waitForRead(batch) else { return }
                    let bytes = pageCount(of: batch) * pageSize
                    fileHasher.hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: ring.pages(of: batch).prefix(bytes)))
                    ring.markFileHashed(batch)
                }
            } else {
                let hasherNumber = worker - (wholeFileSHA256 ? 2 : 1)
                for batch in 0..<batches {
                    guard ring.waitForRead(batch) else { return }
                    let pages = UnsafeRawBufferPointer(ring.pages(of: batch))
                    let hashes = ring.hashes(of: batch)
                    let quickValues = ring.quickValues(of: batch)
                    let base = ring.base(of: batch)
                    let known = quickBase == nil ? 0 : ring.baseKnown(batch)
                    var hashed = 0
                    for index in stride(from: hasherNumber, to: pageCount(of: batch), by: pageHashers) {
                        let page = UnsafeRawBufferPointer(rebasing: pages[(index * pageSize)..<((index + 1) * pageSize)])
                        let hashRange = (index * PageMapFormat.hashSize)..<((index + 1) * PageMapFormat.hashSize)
                        let slot = UnsafeMutableRawBufferPointer(rebasing: hashes[hashRange])
                        if computesQuick {
                            let value = QuickPageMap.hash(page).littleEndian
                            quickValues.storeBytes(of: value, toByteOffset: index * QuickPageMap.valueSize, as: UInt64.self)
                            if index < known,
                                base.quick.load(fromByteOffset: index * QuickPageMap.valueSize, as: UInt64.self) == value
                            {
                                slot.copyMemory(from: UnsafeRawBufferPointer(rebasing: base.hashes[hashRange]))
                                continue
                            }
                        }
                        pageHasher.hash(page, into: slot)
                        hashed += 1
                    }
                    pagesHashed.withLock { $0 += hashed }
                    ring.markPagesHashed(batch)
                }
            }
        }
        defer {
            ring.stop(nil)
            threads.join()
        }

        var oldHashes: [UInt8] = []
        var changed = 0
        for batch in 0..<batches {
            guard ring.waitForPageHashes(batch) else { throw ring.error ?? StoreBackupError.cancelled }
            let first = batch * pagesPerBatch + 1
            let count = pageCount(of: batch)
            let pageBytes = UnsafeRawBufferPointer(ring.pages(of: batch))
            let hashes = UnsafeRawBufferPointer(ring.hashes(of: batch))
            do {
                try quickWriter?.add(
                    UnsafeRawBufferPointer(rebasing: ring.quickValues(of: batch).prefix(count * QuickPageMap.valueSize)))
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
                        bytes: UnsafeRawBufferPointer(rebasing: pageBytes[(index * pageSize)..<((index + 1) * pageSize)]))
                    try changedMap?.add(page: first + index, hash: hash)
                }
            } catch {
                ring.stop(error)
                throw error
            }
            ring.markConsumed(batch)
        }
        if wholeFileSHA256 {
            guard ring.waitForFileHash(batches) else { throw ring.error ?? StoreBackupError.cancelled }
        }
        _ = try map.finish()
        try quickWriter?.finish()
        return Result(
            changedPages: changed,
            sha256: wholeFileSHA256 ? FileDigest.hex(fileHasher.hasher.finalize()) : nil,
            deltaSize: try deltaWriter?.finish(),
            changedMapSize: try changedMap?.finish(),
            pagesHashed: pagesHashed.withLock { $0 })
    }
}

/// The whole file's running SHA-256, updated by the one whole-file hashing thread (batch
/// after batch, in order) and read once that thread is done.
private final class RunningSHA256: @unchecked Sendable {
    var hasher = SHA256()
}
