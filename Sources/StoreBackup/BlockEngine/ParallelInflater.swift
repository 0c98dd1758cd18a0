import CZip
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Inflates one large entry on all cores.
///
/// storebackup deflates big files as independent 1 MiB blocks and records each block's
/// compressed size in the manifest. Restore reads the entry's raw compressed bytes in one
/// pass, hands each block to a worker that inflates it and writes it at its own offset,
/// and hashes the blocks in order as they come back, so SHA-256, CRC-32 and the size are
/// all checked in the same pass (or, with `hashesContent` off, only the CRC-32 and size:
/// the caller reads the file back for its SHA-256 later). Memory is a few blocks, whatever
/// the entry's size.
///
/// An encrypted (WinZip AES) entry is read raw, still encrypted: the HMAC is computed in
/// order over the ciphertext as it is read, and each worker decrypts its block at its own
/// counter offset (known from the block sizes) before inflating it.
struct ParallelInflater {
    /// The libzip handle to read the entry through (called once, with `archiveLock` held),
    /// unless `localFile` is set.
    let archive: () throws -> OpaquePointer
    /// Held around every call on `archive` and the entry read through it, when other
    /// threads use the same handle (``SharedArchiveHandle``).
    var archiveLock: NSLock? = nil
    /// The backup file when it is on this machine: the entry's raw bytes are read from it
    /// with `pread` (its local header checked by ``LocalHeader``), and `archive` is not used.
    var localFile: LocalArchiveFile? = nil
    /// The entry's name length in the central directory, for ``LocalHeader``'s check.
    var centralNameLength: Int? = nil
    let entry: ArchiveEntry
    let blockSize: Int
    let compressedBlocks: [Int]
    let workers: Int
    let cancel: CancellationFlag
    /// Needed for encrypted entries (already checked against the archive's manifest).
    var password: BackupPassword? = nil
    var backupName: String
    /// Drops the entry's compressed bytes from the page cache as they are read.
    var pageCache: ArchivePageCache? = nil
    /// Whether to compute the SHA-256 as the blocks come back.
    var hashesContent = true
    /// Changes each inflated block once a worker has written it (a chain restore's page
    /// deltas, at the block's offset in the entry): on disk, page by page, and in memory, so
    /// that what the calling thread hashes next is final. Called in order, on the calling
    /// thread. The CRC-32, size and SHA-256 are of the entry's bytes, before the change.
    var patchBlock: ((_ offset: Int64, _ block: UnsafeMutableRawBufferPointer) throws -> Void)? = nil

    struct Result {
        /// Nil when `hashesContent` is off.
        var sha256: String?
        var crc: UInt32
        var size: Int64
    }

    /// Whether the manifest's block index fits this entry (else restore reads it sequentially).
    static func canUse(entry: ArchiveEntry, blockSize: Int?, blocks: [Int]?) -> Bool {
        // One block is worth it only for encrypted entries (own AES instead of libzip's).
        let minimumBlocks = entry.isEncrypted ? 1 : 2
        // The block buffers are sized from these numbers: check them against fixed limits first.
        guard let blockSize, let blocks, blocks.count >= minimumBlocks, blockSize > 0,
            blockSize <= ArchiveLimits.maxDeflateBlockSize, entry.compressionMethod == Int32(ZIP_CM_DEFLATE),
            blocks.allSatisfy({ $0 > 0 && $0 <= ArchiveLimits.maxCompressedBlock(blockSize: blockSize) })
        else { return false }
        guard !entry.isEncrypted || entry.encryptionMethod == UInt16(ZIP_EM_AES_256) else { return false }
        let overhead = entry.isEncrypted ? Int64(WinZipAES.overhead) : 0
        let expectedBlocks = (entry.size + Int64(blockSize) - 1) / Int64(blockSize)
        return Int64(blocks.count) == expectedBlocks && Int64(blocks.reduce(0, +)) == entry.compressedSize - overhead
    }

    /// Extracts into `descriptor` (or only checks, when it is -1).
    func run(descriptor: Int32, path: String, onBytes: (Int64) throws -> Void) throws -> Result {
        let raw = try RawEntryBytes(self)
        var authenticator: WinZipAuthenticator?
        var encryptionKey: [UInt8]?
        if entry.isEncrypted {
            guard let password else { throw StoreBackupError.passwordRequired(name: backupName) }
            let header = try raw.read(count: WinZipAES.headerLength)
            let keys = try WinZipPasswordCheck.keys(password: password, header: header, backupName: backupName)
            authenticator = WinZipAuthenticator(keys: keys)
            encryptionKey = keys.encryption
        }

        let maximumCompressed = compressedBlocks.max() ?? 0
        // When the calling thread needs no block's bytes (it neither hashes nor patches them),
        // a worker gives its inflated block back as soon as it is written: one block per
        // worker, and a shorter read-ahead, instead of blocks queued for the calling thread.
        // These buffers are most of what a restore holds beside its entries.
        let blocksStayWithWorkers = !hashesContent && patchBlock == nil
        let inFlightLimit = blocksStayWithWorkers ? workers + 2 : workers * 2 + 2
        let compressedPool = BufferPool(count: inFlightLimit, capacity: maximumCompressed)
        let plainPool = BufferPool(count: blocksStayWithWorkers ? workers : inFlightLimit, capacity: blockSize)
        let state = InflateState()
        // Extracted data goes to disk while we inflate, so the fsync before the swap is short.
        let writeback = descriptor >= 0 ? WritebackPacer(descriptor: descriptor) : nil
        // One writer at a time: a buffered write holds the file's inode lock exclusively
        // anyway, and a second writer would spin on it (the kernel's optimistic spinning)
        // instead of sleeping, burning CPU; a mutex makes the waiting worker sleep and
        // leaves the core to the database's check.
        let writing = NSLock()
        let lastIndex = compressedBlocks.count - 1
        let workersWrite = descriptor >= 0
        let shared = (entry: entry, blockSize: blockSize, backupName: backupName, key: encryptionKey)
        let inflating = WorkerPool.start(name: "storebackup-inflate", width: workers) { [shared] _ in
            let (entry, blockSize, backupName, encryptionKey) = shared
            let inflater: BlockInflater
            do { inflater = try BlockInflater() } catch { return state.fail(error) }
            let ctr: WinZipCTR?
            do { ctr = try encryptionKey.map { try WinZipCTR(key: $0) } } catch { return state.fail(error) }
            while let job = state.nextJob() {
                guard let plain = plainPool.take() else { return }
                ctr?.apply(to: job.compressed.bytes, count: job.compressed.count, at: job.offset)
                let expected = Int(min(Int64(blockSize), entry.size - Int64(job.index) * Int64(blockSize)))
                let inflated = inflater.inflate(
                    job.compressed.bytes, count: job.compressed.count, into: plain.bytes,
                    capacity: plain.capacity, isLast: job.index == lastIndex)
                plain.count = inflated ?? 0
                job.compressed.recycle()
                guard inflated == expected else {
                    plain.recycle()
                    return state.fail(
                        StoreBackupError.corruptArchive(
                            name: backupName, reason: "\(entry.path) cannot be decompressed (block \(job.index))"))
                }
                if workersWrite {
                    writing.lock()
                    defer { writing.unlock() }
                    var written = 0
                    while written < plain.count {
                        let result = pwrite(
                            descriptor, plain.bytes + written, plain.count - written,
                            off_t(Int64(job.index) * Int64(blockSize) + Int64(written)))
                        if result < 0 {
                            if errno == EINTR { continue }
                            plain.recycle()
                            return state.fail(StoreBackupError.io(path: path, operation: "write", errno: errno))
                        }
                        written += result
                    }
                    writeback?.wrote(plain.count)
                }
                let crc = CRC32.update(0, plain.bytes, count: plain.count)
                if blocksStayWithWorkers {
                    let count = plain.count
                    plain.recycle()
                    state.complete(index: job.index, block: .size(count), crc: crc)
                } else {
                    state.complete(index: job.index, block: .bytes(plain), crc: crc)
                }
            }
        }
        defer {
            // Stop the workers and wait for them: none may touch the descriptor after we return.
            state.finish()
            compressedPool.close()
            plainPool.close()
            inflating.join()
        }

        var hasher = SHA256()
        var crc: UInt32 = 0
        var size: Int64 = 0
        var nextToRead = 0
        var nextToHash = 0
        var readOffset: Int64 = 0
        var droppedTo: Int64 = 0
        while nextToHash < compressedBlocks.count {
            try cancel.throwIfCancelled()
            if nextToRead < compressedBlocks.count && nextToRead - nextToHash < inFlightLimit - 1 {
                guard let buffer = compressedPool.take() else { throw state.failure ?? StoreBackupError.cancelled }
                let got = compressedBlocks[nextToRead]
                do { try raw.read(into: UnsafeMutableRawBufferPointer(start: buffer.bytes, count: got)) } catch {
                    buffer.recycle()
                    throw error
                }
                buffer.count = got
                authenticator?.update(buffer.contents)
                state.add(Job(index: nextToRead, compressed: buffer, offset: readOffset))
                readOffset += Int64(got)
                nextToRead += 1
                if readOffset - droppedTo >= Self.dropStep {
                    // Up to what was read, not counting the local header: never ahead of libzip.
                    pageCache?.drop(offset: entry.archiveOffset + droppedTo, count: readOffset - droppedTo)
                    droppedTo = readOffset
                }
                continue
            }
            let (block, blockCRC) = try state.waitForBlock(nextToHash)
            guard case .bytes(let plain) = block else {
                crc = UInt32(crc32_combine(uLong(crc), uLong(blockCRC), off_t(block.count)))
                size += Int64(block.count)
                try onBytes(Int64(block.count))
                nextToHash += 1
                continue
            }
            if hashesContent { hasher.update(bufferPointer: plain.contents) }
            crc = UInt32(crc32_combine(uLong(crc), uLong(blockCRC), off_t(plain.count)))
            size += Int64(plain.count)
            defer { plain.recycle() }
            if let patchBlock, descriptor >= 0 {
                // The worker wrote the block before completing it: the patch's pages land after it.
                try patchBlock(Int64(nextToHash) * Int64(blockSize), UnsafeMutableRawBufferPointer(start: plain.bytes, count: plain.count))
            }
            try onBytes(Int64(plain.count))
            nextToHash += 1
        }
        if let authenticator {
            let code = try raw.read(count: WinZipAES.authenticationCodeLength)
            guard authenticator.isAuthentic(code: code) else {
                throw StoreBackupError.checksumMismatch(name: backupName, entry: entry.path)
            }
        }
        let digest = hashesContent ? FileDigest.hex(hasher.finalize()) : nil
        return Result(sha256: digest, crc: crc, size: size)
    }

    /// The entry's raw bytes (compressed, and still encrypted), read in order: from the file
    /// with `pread`, or through libzip under `archiveLock`.
    private final class RawEntryBytes {
        private let inflater: ParallelInflater
        private let file: OpaquePointer?
        private let dataOffset: Int64
        private var position: Int64 = 0

        init(_ inflater: ParallelInflater) throws {
            self.inflater = inflater
            let entry = inflater.entry
            if let local = inflater.localFile {
                dataOffset = try LocalHeader.dataOffset(
                    of: entry, in: local, centralNameLength: inflater.centralNameLength, backupName: inflater.backupName)
                file = nil
                return
            }
            dataOffset = 0
            // ZIP_FL_ENCRYPTED: the bytes as stored (salt, verifier, ciphertext, MAC), not decrypted by libzip.
            let flags = entry.isEncrypted ? ZIP_FL_ENCRYPTED : ZIP_FL_COMPRESSED
            var failure = ""
            let opened = try inflater.locked {
                let archive = try inflater.archive()
                let raw = zip_fopen_index(archive, entry.index, zip_flags_t(flags))
                if raw == nil { failure = String(cString: zip_strerror(archive)) }
                return raw
            }
            guard let opened else { throw StoreBackupError.corruptArchive(name: inflater.backupName, reason: failure) }
            file = opened
        }

        deinit { if let file { inflater.locked { _ = zip_fclose(file) } } }

        /// Fills `buffer` with the next bytes; throws when the entry ends first.
        func read(into buffer: UnsafeMutableRawBufferPointer) throws {
            let endsEarly = StoreBackupError.corruptArchive(name: inflater.backupName, reason: "\(inflater.entry.path) ends early")
            if let file {
                var got = 0
                while got < buffer.count {
                    let count = inflater.locked { zip_fread(file, buffer.baseAddress! + got, zip_uint64_t(buffer.count - got)) }
                    guard count > 0 else { throw endsEarly }
                    got += Int(count)
                }
            } else {
                // Never past the entry's own bytes, whatever the block sizes say.
                guard position + Int64(buffer.count) <= inflater.entry.compressedSize,
                    try inflater.localFile!.readFully(at: dataOffset + position, into: buffer) == buffer.count
                else { throw endsEarly }
            }
            position += Int64(buffer.count)
        }

        func read(count: Int) throws -> [UInt8] {
            var bytes = [UInt8](repeating: 0, count: count)
            try bytes.withUnsafeMutableBytes { try read(into: $0) }
            return bytes
        }
    }

    fileprivate func locked<T>(_ body: () throws -> T) rethrows -> T {
        archiveLock?.lock()
        defer { archiveLock?.unlock() }
        return try body()
    }

    /// How much of the entry is read between two drops from the page cache.
    private static let dropStep: Int64 = 8 << 20

    /// An inflated block as the calling thread gets it: its bytes, or only how many there
    /// were when the worker gave the buffer back already.
    enum Block {
        case bytes(PooledBuffer)
        case size(Int)

        var count: Int {
            switch self {
            case .bytes(let buffer): buffer.count
            case .size(let count): count
            }
        }
    }

    struct Job {
        let index: Int
        let compressed: PooledBuffer
        /// Where the block starts in the entry's compressed (and encrypted) data.
        let offset: Int64
    }
}

/// The queue of blocks to inflate and the blocks inflated, shared by the threads.
// Unchecked: every property is used only with `monitor` locked.
private final class InflateState: @unchecked Sendable {
    private let monitor = Monitor()
    /// Workers wait for a block to inflate.
    private let jobAdded: Monitor.Condition
    /// The hashing thread waits for the next block in order.
    private let blockDone: Monitor.Condition
    private var jobs: [ParallelInflater.Job] = []
    private var done: [Int: (ParallelInflater.Block, UInt32)] = [:]
    /// The block the hashing thread waits for.
    private var awaited = -1
    private var finished = false
    private(set) var failure: Error?

    init() {
        jobAdded = monitor.makeCondition()
        blockDone = monitor.makeCondition()
    }

    func add(_ job: ParallelInflater.Job) {
        monitor.lock()
        jobs.append(job)
        jobAdded.signal()
        monitor.unlock()
    }

    func nextJob() -> ParallelInflater.Job? {
        monitor.lock()
        defer { monitor.unlock() }
        while jobs.isEmpty && !finished && failure == nil { jobAdded.wait(seconds: 0.2) }
        if finished || failure != nil { return nil }
        return jobs.removeFirst()
    }

    func complete(index: Int, block: ParallelInflater.Block, crc: UInt32) {
        monitor.lock()
        done[index] = (block, crc)
        if index == awaited { blockDone.signal() }
        monitor.unlock()
    }

    func waitForBlock(_ index: Int) throws -> (ParallelInflater.Block, UInt32) {
        monitor.lock()
        defer { monitor.unlock() }
        awaited = index
        while done[index] == nil && failure == nil { blockDone.wait(seconds: 0.2) }
        awaited = -1
        if let failure { throw failure }
        return done.removeValue(forKey: index)!
    }

    func fail(_ error: Error) {
        monitor.lock()
        if failure == nil { failure = error }
        jobAdded.broadcast()
        blockDone.broadcast()
        monitor.unlock()
    }

    func finish() {
        monitor.lock()
        finished = true
        jobAdded.broadcast()
        blockDone.broadcast()
        monitor.unlock()
    }
}
