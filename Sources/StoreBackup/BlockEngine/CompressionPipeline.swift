import CZip
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Reads, hashes and compresses the archive's file contents ahead of libzip, on all cores.
///
/// libzip compresses entries one after another on the thread that calls `zip_close`.
/// Instead, a reader thread cuts each entry into blocks (hashing as it goes, since
/// SHA-256 is sequential), worker threads deflate blocks in parallel the way pigz does
/// in its independent mode (`BlockDeflater`: ISA-L at levels 1-3, zlib above; each block
/// deflated on its own and ended with a full flush, so
/// the pieces concatenate into one valid deflate stream, and each can also be inflated on
/// its own: restore inflates big entries in parallel from the block sizes in the
/// manifest), and the `zip_close` thread
/// takes finished blocks in order through `EntrySource`. libzip copies deflated data
/// as-is when the source says it is already deflated (zip_close.c, add_data), and
/// writes the archive itself. Memory stays bounded: blocks come from two lanes of fixed
/// buffers (``BlockLane``), one for 1 MiB blocks and one, with a deeper queue, for small files.
///
/// With a password, workers also encrypt (WinZip AES-256, see `WinZipAES`). Counter mode
/// needs a block's offset in the entry's compressed data, known once every earlier block
/// of the entry is compressed: so a compressed block gets its offset as soon as its
/// predecessors have theirs, and then any worker encrypts it. Workers also derive each
/// entry's keys (PBKDF2, about a millisecond). Only the HMAC runs in order, in the writer.
// Unchecked: the mutable state is used only with `monitor` locked; `groups` is set before the threads start.
final class CompressionPipeline: @unchecked Sendable {
    typealias Method = CompressionPlan.Method
    typealias Job = CompressionPlan.Job

    struct FileResult {
        var size: Int64
        var sha256: String
    }

    final class Block {
        let jobIndex: Int
        /// The first block of its job; with `isLast`, the job's only one.
        let isFirst: Bool
        let isLast: Bool
        /// Which of the pipeline's lanes the block's buffers come from.
        let lane: Int
        /// The raw bytes; returned to the pool once compressed (or handed on as output when stored).
        var input: PooledBuffer?
        var output: PooledBuffer?
        var crc: UInt32 = 0
        /// (Format 4.) SHA-256 of the block's bytes, for deflated entries of more than one block.
        var plainDigest: RawSHA256?
        let uncompressedCount: Int
        var claimed = false
        /// Compressed (and for stored blocks, checksummed).
        var compressed = false
        /// Where this block starts in its entry's compressed data (encrypted archives).
        var cipherOffset: Int64?
        var encryptionClaimed = false
        /// Ready for the writer: compressed, and encrypted when there is a password.
        var done = false

        init(jobIndex: Int, isFirst: Bool, isLast: Bool, lane: Int, input: PooledBuffer) {
            self.jobIndex = jobIndex
            self.isFirst = isFirst
            self.isLast = isLast
            self.lane = lane
            self.input = input
            self.uncompressedCount = input.count
        }
    }

    static let blockSize = 1 << 20
    /// Files this small go through the small lane. The benchmark's blobs are 128 KiB.
    static let smallBlockSize = 128 << 10

    let plan: CompressionPlan
    var jobs: [Job] { plan.jobs }
    private let level: Int32
    private let workerCount: Int
    private let cancel: CancellationFlag
    private let onBytesRead: @Sendable (Int64, String) -> Void
    private let password: BackupPassword?
    /// The salt and keys of the encrypted entries being written, by job; each is dropped
    /// once its entry is written (see ``finishedEntry(forJob:)``).
    private var secrets: [Int: LazyEntrySecrets] = [:]
    /// Per job whose blocks are being encrypted, the compressed bytes that already have an
    /// offset; dropped with the job's last block.
    private var assignedCipherBytes: [Int: Int64] = [:]

    /// `bigLane` for 1 MiB blocks, `smallLane` for files of at most `smallBlockSize`.
    private let lanes: [BlockLane]
    private let bigLane = 0, smallLane = 1
    /// Per lane, the blocks in `queue`.
    private var queuedInLane = [0, 0]
    private let monitor = Monitor()
    /// The writer waits for the block at the head of the queue to be done.
    private let headDone: Monitor.Condition
    /// Workers wait for a block to compress or encrypt.
    private let workQueued: Monitor.Condition
    /// The reader waits for room in the queue.
    private let roomInQueue: Monitor.Condition
    private var queue: [Block] = []
    private var readerFinished = false
    private var failure: Error?
    private var stopped = false
    /// Per job, the bytes read (-1 until the last block is read), and the SHA-256 of them:
    /// compact arrays, not a value per job.
    private var sizes: [Int64]
    private var digests: [UInt8]
    private static let digestLength = 32
    /// The compressed size of each block, for deflated jobs of more than one block only.
    private var compressedBlockSizes: [Int32: [Int32]] = [:]
    /// The SHA-256 of each of those blocks' bytes (format 4), beside their sizes.
    private var blockDigests: [Int32: [RawSHA256]] = [:]
    private var groups: [WorkerPool.Group] = []

    init(
        plan: CompressionPlan, level: Int, workers: Int, cancel: CancellationFlag, password: BackupPassword? = nil,
        onBytesRead: @escaping @Sendable (Int64, String) -> Void
    ) {
        self.plan = plan
        self.password = password
        sizes = [Int64](repeating: -1, count: plan.jobs.count)
        digests = [UInt8](repeating: 0, count: plan.jobs.count * Self.digestLength)
        self.level = Int32(max(1, min(9, level)))
        self.workerCount = max(1, workers)
        self.cancel = cancel
        self.onBytesRead = onBytesRead
        headDone = monitor.makeCondition()
        workQueued = monitor.makeCondition()
        roomInQueue = monitor.makeCondition()
        let capacity = max(3, workerCount + 2)
        lanes = [
            BlockLane(blockSize: Self.blockSize, capacity: capacity),
            BlockLane(blockSize: Self.smallBlockSize, capacity: 3 * capacity),
        ]
    }

    /// Gives a consumed block's buffers back for reuse.
    func recycle(_ block: Block) {
        block.output?.recycle()
        block.output = nil
    }

    /// Starts the reader and the workers (all as batch work, see ``WorkerPool/start``).
    func start() {
        groups.append(WorkerPool.start(name: "storebackup-reader", width: 1, batch: true) { [self] _ in runReader() })
        groups.append(WorkerPool.start(name: "storebackup-deflate", width: workerCount, batch: true) { [self] _ in runWorker() })
    }

    /// Stops every thread and waits for them to end; blocks already queued are dropped.
    func stop() {
        monitor.lock()
        stopped = true
        wakeEveryone()
        monitor.unlock()
        lanes.forEach { $0.close() }
        groups.forEach { $0.join() }
    }

    /// Frees the block buffers once every block has been delivered (before the manifest is
    /// built, so their memory and the manifest's do not add up).
    func releaseBuffers() {
        lanes.forEach { $0.release() }
    }

    /// The next finished block of job `jobIndex`, in order. Throws the first failure.
    func nextBlock(forJob jobIndex: Int) throws -> Block {
        monitor.lock()
        defer { monitor.unlock() }
        while true {
            if let failure { throw failure }
            if cancel.isCancelled { throw StoreBackupError.cancelled }
            if let head = queue.first, head.done {
                guard head.jobIndex == jobIndex else {
                    throw StoreBackupError.archiveWrite(reason: "internal error: blocks out of order")
                }
                queue.removeFirst()
                queuedInLane[head.lane] -= 1
                roomInQueue.signal()
                if jobs[jobIndex].method != .store && !(head.isFirst && head.isLast) {
                    compressedBlockSizes[Int32(jobIndex), default: []].append(Int32(head.output?.count ?? 0))
                    if let digest = head.plainDigest { blockDigests[Int32(jobIndex), default: []].append(digest) }
                }
                return head
            }
            if readerFinished && queue.isEmpty {
                throw StoreBackupError.archiveWrite(reason: "internal error: entry data ended early")
            }
            // Timed: cancellation is polled.
            headDone.wait(seconds: 0.2)
        }
    }

    /// The compressed size of each block of a deflated entry (an index for parallel
    /// inflating), once the writer has taken them; nil for stored entries and entries of
    /// one block (which need no index).
    func compressedBlocks(forJob jobIndex: Int) -> [Int]? {
        monitor.lock()
        defer { monitor.unlock() }
        return compressedBlockSizes[Int32(jobIndex)]?.map(Int.init)
    }

    /// The SHA-256 of each block's bytes, for the same entries as ``compressedBlocks(forJob:)``
    /// (docs/FORMAT.md, format 4); nil where that is nil.
    func blockHashes(forJob jobIndex: Int) -> [RawSHA256]? {
        monitor.lock()
        defer { monitor.unlock() }
        guard let hashes = blockDigests[Int32(jobIndex)], hashes.count == compressedBlockSizes[Int32(jobIndex)]?.count else { return nil }
        return hashes
    }

    /// The salt and keys of an encrypted job's entry, made once by whichever thread asks
    /// first, and kept until ``finishedEntry(forJob:)``.
    func entrySecrets(forJob jobIndex: Int) throws -> WinZipAES.EntrySecrets {
        guard let password else { throw StoreBackupError.archiveWrite(reason: "internal error: no password") }
        monitor.lock()
        let lazy: LazyEntrySecrets
        if let existing = secrets[jobIndex] {
            lazy = existing
        } else {
            lazy = LazyEntrySecrets()
            secrets[jobIndex] = lazy
        }
        monitor.unlock()
        // Derived outside the pipeline's lock: PBKDF2 takes about a millisecond.
        return try lazy.get(password: password)
    }

    /// The writer has served every byte of the job's entry: its keys are not needed again
    /// (every block of it is encrypted by then).
    func finishedEntry(forJob jobIndex: Int) {
        monitor.lock()
        secrets[jobIndex] = nil
        monitor.unlock()
    }

    /// The bytes read for the job, once its last block is read.
    func readSize(forJob jobIndex: Int) -> Int64? {
        monitor.lock()
        defer { monitor.unlock() }
        return sizes[jobIndex] >= 0 ? sizes[jobIndex] : nil
    }

    /// The size and SHA-256 (hex) of what was read for the job, once its last block is read.
    func result(forJob jobIndex: Int) -> FileResult? {
        monitor.lock()
        defer { monitor.unlock() }
        guard sizes[jobIndex] >= 0 else { return nil }
        let start = jobIndex * Self.digestLength
        return FileResult(size: sizes[jobIndex], sha256: FileDigest.hex(digests[start..<start + Self.digestLength]))
    }

    // MARK: Reader

    private func runReader() {
        do {
            for jobIndex in jobs.indices {
                try readJob(jobIndex)
            }
            monitor.lock()
            readerFinished = true
            // Workers with nothing left to do may end; the writer learns of a short entry.
            workQueued.broadcast()
            headDone.signal()
            monitor.unlock()
        } catch {
            fail(error)
        }
    }

    private func readJob(_ jobIndex: Int) throws {
        let job = jobs[jobIndex]
        let item = plan.item(ofJob: jobIndex)
        let snapshot = plan.snapshots[jobIndex]
        let lane = job.plannedSize <= Int64(Self.smallBlockSize) ? smallLane : bigLane
        // Each read fills at most one of this lane's buffers (128 KiB ones for small files).
        let blockSize = lanes[lane].blockSize
        var hasher = SHA256()
        var offset: Int64 = 0
        var descriptor: Int32 = -1
        if snapshot == nil {
            descriptor = EscapedName.withSystemPath(item.absolutePath) { open($0, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
            guard descriptor >= 0 else {
                throw StoreBackupError.io(path: item.absolutePath, operation: "open", errno: errno)
            }
            posix_fadvise(descriptor, 0, 0, POSIX_FADV_SEQUENTIAL)
        }
        defer { if descriptor >= 0 { close(descriptor) } }

        repeat {
            let wanted = Int(min(Int64(blockSize), max(0, job.plannedSize - offset)))
            guard let input = lanes[lane].inputs.take() else { throw StoreBackupError.cancelled }
            let got: Int
            if wanted == 0 {
                got = 0
            } else if let snapshot {
                got = try snapshot.read(into: input.bytes, count: wanted, offset: offset)
            } else {
                got = try Self.readFully(descriptor, into: input.bytes, count: wanted, path: item.absolutePath)
            }
            input.count = got
            hasher.update(bufferPointer: input.contents)
            let isFirst = offset == 0
            offset += Int64(got)
            let isLast = got < blockSize || offset >= job.plannedSize
            let block = Block(jobIndex: jobIndex, isFirst: isFirst, isLast: isLast, lane: lane, input: input)
            if isLast {
                // Recorded before the last block is queued, so it is known once that block is consumed.
                let digest = hasher.finalize()
                monitor.lock()
                sizes[jobIndex] = offset
                let start = jobIndex * Self.digestLength
                for (offset, byte) in digest.enumerated() { digests[start + offset] = byte }
                monitor.unlock()
                snapshot?.readingFinished()
            }
            try enqueue(block)
            onBytesRead(Int64(got), item.relativePath)
            if isLast { break }
        } while true
    }

    private static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawPointer, count: Int, path: String) throws -> Int {
        var total = 0
        while total < count {
            let got = read(fd, buffer + total, count - total)
            if got < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "read", errno: errno)
            }
            if got == 0 { break }
            total += got
        }
        return total
    }

    private func enqueue(_ block: Block) throws {
        monitor.lock()
        defer { monitor.unlock() }
        while queuedInLane[block.lane] >= lanes[block.lane].capacity && !stopped && failure == nil && !cancel.isCancelled {
            roomInQueue.wait(seconds: 0.2)
        }
        if cancel.isCancelled { throw StoreBackupError.cancelled }
        if stopped || failure != nil { throw StoreBackupError.cancelled }
        queue.append(block)
        queuedInLane[block.lane] += 1
        workQueued.signal()
    }

    private func fail(_ error: Error) {
        monitor.lock()
        if failure == nil { failure = error }
        wakeEveryone()
        monitor.unlock()
    }

    /// For a stop or a failure. Called with the lock held.
    private func wakeEveryone() {
        headDone.broadcast()
        workQueued.broadcast()
        roomInQueue.broadcast()
    }

    /// `block` is ready for the writer. Called with the lock held.
    private func markDone(_ block: Block) {
        block.done = true
        if block === queue.first { headDone.signal() }
        // The last block done lets workers waiting for more work end.
        if readerFinished { workQueued.broadcast() }
    }

    // MARK: Workers

    private func runWorker() {
        let deflater: BlockDeflater
        let storedDeflater: BlockDeflater
        do {
            deflater = try BlockDeflater(level: Int(level))
            storedDeflater = try BlockDeflater(level: 0)
        } catch {
            return fail(error)
        }
        let ctr: WinZipCTR?
        do { ctr = password == nil ? nil : try WinZipCTR() } catch { return fail(error) }
        while let work = claimWork() {
            do {
                switch work {
                case .encrypt(let block):
                    try encrypt(block, ctr: ctr!)
                    monitor.lock()
                    markDone(block)
                    monitor.unlock()
                case .compress(let block):
                    let method = jobs[block.jobIndex].method
                    // Taken after claiming, from the block's lane: one is always free (see BlockLane).
                    // Stored blocks need none: their input is handed on.
                    var output: PooledBuffer?
                    if method != .store {
                        guard let taken = lanes[block.lane].outputs.take() else { return }
                        output = taken
                    }
                    try process(block, output: output, deflater: method == .storedDeflate ? storedDeflater : deflater)
                    // Derive the entry's keys here, in parallel, before the writer needs them.
                    if password != nil { _ = try entrySecrets(forJob: block.jobIndex) }
                    monitor.lock()
                    block.compressed = true
                    if password == nil { markDone(block) } else { assignCipherOffsets() }
                    monitor.unlock()
                }
            } catch {
                fail(error)
                return
            }
        }
    }

    private enum Work {
        case compress(Block)
        case encrypt(Block)
    }

    /// The next block to encrypt (first: they are what the writer waits for) or to compress.
    private func claimWork() -> Work? {
        monitor.lock()
        defer { monitor.unlock() }
        while true {
            if stopped || failure != nil || cancel.isCancelled { return nil }
            if password != nil, let block = queue.first(where: { $0.cipherOffset != nil && !$0.encryptionClaimed }) {
                block.encryptionClaimed = true
                return .encrypt(block)
            }
            if let block = queue.first(where: { !$0.claimed }) {
                block.claimed = true
                return .compress(block)
            }
            if readerFinished && !queue.contains(where: { !$0.done }) { return nil }
            workQueued.wait(seconds: 0.2)
        }
    }

    /// Gives compressed blocks their offsets, in order within each entry. Called with the lock held.
    private func assignCipherOffsets() {
        var waiting = Set<Int>()
        for block in queue where block.cipherOffset == nil {
            guard !waiting.contains(block.jobIndex) else { continue }
            guard block.compressed, let output = block.output else {
                waiting.insert(block.jobIndex)
                continue
            }
            let offset = assignedCipherBytes[block.jobIndex, default: 0]
            block.cipherOffset = offset
            assignedCipherBytes[block.jobIndex] = block.isLast ? nil : offset + Int64(output.count)
            workQueued.signal()  // a block to encrypt
        }
    }

    private func encrypt(_ block: Block, ctr: WinZipCTR) throws {
        guard let output = block.output, let offset = block.cipherOffset else { return }
        try ctr.use(key: try entrySecrets(forJob: block.jobIndex).keys.encryption)
        ctr.apply(to: output.bytes, count: output.count, at: offset)
    }

    private func process(_ block: Block, output: PooledBuffer?, deflater: BlockDeflater) throws {
        guard let input = block.input else { output?.recycle(); return }
        block.crc = CRC32.update(0, input.bytes, count: input.count)
        // Hashed by the worker while the block is in its cache: the reader thread's whole-entry
        // SHA-256 is sequential and already the pipeline's narrowest step.
        if output != nil && !(block.isFirst && block.isLast) {
            block.plainDigest = RawSHA256(bytes: SHA256.hash(data: UnsafeRawBufferPointer(start: input.bytes, count: input.count)))
        }
        guard let output else {
            // Stored: the input buffer itself is the output.
            block.output = input
            block.input = nil
            return
        }
        output.count = try deflater.deflate(
            input.bytes, count: input.count, into: output.bytes,
            capacity: output.capacity, isLast: block.isLast)
        block.output = output
        block.input = nil
        input.recycle()
    }
}

/// One entry's salt and keys, made on first use; several threads may ask at once.
final class LazyEntrySecrets: Sendable {
    private let secrets = Locked<WinZipAES.EntrySecrets?>(nil)

    func get(password: BackupPassword) throws -> WinZipAES.EntrySecrets {
        try secrets.withLock { secrets in
            if let secrets { return secrets }
            let made = try WinZipAES.EntrySecrets(password: password)
            secrets = made
            return made
        }
    }
}
