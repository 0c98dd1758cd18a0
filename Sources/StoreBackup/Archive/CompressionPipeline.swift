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
/// in its independent mode (each block deflated on its own and ended with a sync flush, so
/// the pieces concatenate into one valid deflate stream, and each can also be inflated on
/// its own: restore inflates big entries in parallel from the block sizes in the
/// manifest), and the `zip_close` thread
/// takes finished blocks in order through `EntrySource`. libzip copies deflated data
/// as-is when the source says it is already deflated (zip_close.c, add_data), and
/// writes the archive itself. Memory stays bounded: at most `capacity` blocks exist.
final class CompressionPipeline: @unchecked Sendable {
    enum Method {
        case deflate, store
        /// Deflate at level 0 (stored deflate blocks): how incompressible files go into an
        /// encrypted archive. libzip cannot take encrypted data declared as STORE as it is
        /// (zip_close.c add_data would compute the CRC of the ciphertext), but it copies
        /// encrypted DEFLATE data unchanged. The cost is 5 bytes per 64 KiB.
        case storedDeflate
    }

    struct Job {
        let entryIndex: Int
        let item: StoreItem
        let snapshot: DatabaseSnapshot?
        let method: Method
        let plannedSize: Int64
    }

    struct FileResult {
        var size: Int64
        var sha256: String
    }

    final class Block {
        let jobIndex: Int
        let isLast: Bool
        /// The raw bytes; returned to the pool once compressed (or handed on as output when stored).
        var input: PooledBuffer?
        var output: PooledBuffer?
        var crc: UInt32 = 0
        let uncompressedCount: Int
        var claimed = false
        var done = false

        init(jobIndex: Int, isLast: Bool, input: PooledBuffer) {
            self.jobIndex = jobIndex
            self.isLast = isLast
            self.input = input
            self.uncompressedCount = input.count
        }
    }

    static let blockSize = 1 << 20

    let jobs: [Job]
    private let level: Int32
    private let workerCount: Int
    private let capacity: Int
    private let cancel: CancellationFlag
    private let onBytesRead: @Sendable (Int64, String) -> Void

    private let inputPool: BufferPool
    private let outputPool: BufferPool
    private let condition = NSCondition()
    private var queue: [Block] = []
    private var readerFinished = false
    private var failure: Error?
    private var stopped = false
    private var results: [Int: FileResult] = [:]
    private var compressedBlockSizes: [Int: [Int]] = [:]
    private var threads: [Thread] = []

    init(jobs: [Job], level: Int, workers: Int, cancel: CancellationFlag,
         onBytesRead: @escaping @Sendable (Int64, String) -> Void) {
        self.jobs = jobs
        self.level = Int32(max(1, min(9, level)))
        self.workerCount = max(1, workers)
        self.capacity = max(3, workers + 2)
        self.cancel = cancel
        self.onBytesRead = onBytesRead
        // Input buffers bound the queue. Each worker holds an output buffer before it
        // claims a block, and at most `capacity - 1` finished blocks wait for the writer,
        // so workers + capacity output buffers can never all be stuck (no deadlock).
        inputPool = BufferPool(count: capacity + 1, capacity: Self.blockSize)
        outputPool = BufferPool(count: workerCount + capacity, capacity: Self.blockSize + Self.blockSize / 16 + 1024)
    }

    /// Gives a consumed block's buffers back for reuse.
    func recycle(_ block: Block) {
        block.output?.recycle()
        block.output = nil
    }

    func start() {
        let reader = Thread { [self] in runReader() }
        reader.name = "storebackup-reader"
        threads.append(reader)
        for number in 0..<workerCount {
            let worker = Thread { [self] in runWorker() }
            worker.name = "storebackup-deflate-\(number)"
            threads.append(worker)
        }
        threads.forEach { $0.start() }
    }

    /// Stops every thread; blocks already queued are dropped.
    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
        inputPool.close()
        outputPool.close()
    }

    /// The next finished block of job `jobIndex`, in order. Throws the first failure.
    func nextBlock(forJob jobIndex: Int) throws -> Block {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let failure { throw failure }
            if cancel.isCancelled { throw StoreBackupError.cancelled }
            if let head = queue.first, head.done {
                guard head.jobIndex == jobIndex else {
                    throw StoreBackupError.archiveWrite(reason: "internal error: blocks out of order")
                }
                queue.removeFirst()
                condition.broadcast()
                return head
            }
            if readerFinished && queue.isEmpty {
                throw StoreBackupError.archiveWrite(reason: "internal error: entry data ended early")
            }
            _ = condition.wait(until: Date().addingTimeInterval(0.2))
        }
    }

    /// Called by the writer for each block of a deflated entry, in order.
    func recordCompressedBlock(job jobIndex: Int, size: Int) {
        condition.lock()
        compressedBlockSizes[jobIndex, default: []].append(size)
        condition.unlock()
    }

    /// The compressed size of each block of a deflated entry (an index for parallel inflating).
    func compressedBlocks(forJob jobIndex: Int) -> [Int]? {
        condition.lock()
        defer { condition.unlock() }
        return jobs[jobIndex].method == .store ? nil : compressedBlockSizes[jobIndex]
    }

    func result(forJob jobIndex: Int) -> FileResult? {
        condition.lock()
        defer { condition.unlock() }
        return results[jobIndex]
    }

    // MARK: Reader

    private func runReader() {
        do {
            for (jobIndex, job) in jobs.enumerated() {
                try readJob(jobIndex, job)
            }
            condition.lock()
            readerFinished = true
            condition.broadcast()
            condition.unlock()
        } catch {
            fail(error)
        }
    }

    private func readJob(_ jobIndex: Int, _ job: Job) throws {
        var hasher = SHA256()
        var offset: Int64 = 0
        var descriptor: Int32 = -1
        if job.snapshot == nil {
            descriptor = open(job.item.absolutePath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else {
                throw StoreBackupError.io(path: job.item.absolutePath, operation: "open", errno: errno)
            }
            posix_fadvise(descriptor, 0, 0, POSIX_FADV_SEQUENTIAL)
        }
        defer { if descriptor >= 0 { close(descriptor) } }

        repeat {
            let wanted = Int(min(Int64(Self.blockSize), max(0, job.plannedSize - offset)))
            guard let input = inputPool.take() else { throw StoreBackupError.cancelled }
            let got: Int
            if wanted == 0 {
                got = 0
            } else if let snapshot = job.snapshot {
                got = try snapshot.read(into: input.bytes, count: wanted, offset: offset)
            } else {
                got = try Self.readFully(descriptor, into: input.bytes, count: wanted, path: job.item.absolutePath)
            }
            input.count = got
            hasher.update(bufferPointer: input.contents)
            offset += Int64(got)
            let isLast = got < Self.blockSize || offset >= job.plannedSize
            let block = Block(jobIndex: jobIndex, isLast: isLast, input: input)
            if isLast {
                // Recorded before the last block is queued, so it is known once that block is consumed.
                let digest = hasher.finalize().map { String(format: "%02x", $0) }.joined()
                condition.lock()
                results[jobIndex] = FileResult(size: offset, sha256: digest)
                condition.unlock()
                job.snapshot?.finish()
            }
            try enqueue(block)
            onBytesRead(Int64(got), job.item.relativePath)
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
        condition.lock()
        defer { condition.unlock() }
        while queue.count >= capacity && !stopped && failure == nil && !cancel.isCancelled {
            _ = condition.wait(until: Date().addingTimeInterval(0.2))
        }
        if cancel.isCancelled { throw StoreBackupError.cancelled }
        if stopped || failure != nil { throw StoreBackupError.cancelled }
        queue.append(block)
        condition.broadcast()
    }

    private func fail(_ error: Error) {
        condition.lock()
        if failure == nil { failure = error }
        condition.broadcast()
        condition.unlock()
    }

    // MARK: Workers

    private func runWorker() {
        var stream = z_stream()
        var storedStream = z_stream()
        guard sb_deflate_init_raw(&stream, level) == Z_OK, sb_deflate_init_raw(&storedStream, 0) == Z_OK else {
            fail(StoreBackupError.archiveWrite(reason: "zlib deflateInit failed"))
            return
        }
        defer {
            deflateEnd(&stream)
            deflateEnd(&storedStream)
        }
        while let output = outputPool.take() {
            guard let block = claimNextBlock() else {
                output.recycle()
                return
            }
            do {
                if jobs[block.jobIndex].method == .storedDeflate {
                    try process(block, output: output, stream: &storedStream)
                } else {
                    try process(block, output: output, stream: &stream)
                }
                condition.lock()
                block.done = true
                condition.broadcast()
                condition.unlock()
            } catch {
                fail(error)
                return
            }
        }
    }

    private func claimNextBlock() -> Block? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if stopped || failure != nil || cancel.isCancelled { return nil }
            if let block = queue.first(where: { !$0.claimed }) {
                block.claimed = true
                return block
            }
            if readerFinished { return nil }
            _ = condition.wait(until: Date().addingTimeInterval(0.2))
        }
    }

    private func process(_ block: Block, output: PooledBuffer, stream: inout z_stream) throws {
        guard let input = block.input else { return output.recycle() }
        block.crc = UInt32(crc32(0, input.bytes.assumingMemoryBound(to: Bytef.self), uInt(input.count)))
        guard jobs[block.jobIndex].method != .store else {
            // Stored: the input buffer itself is the output.
            output.recycle()
            block.output = input
            block.input = nil
            return
        }
        guard deflateReset(&stream) == Z_OK else { throw StoreBackupError.archiveWrite(reason: "zlib deflateReset failed") }
        stream.next_in = input.bytes.assumingMemoryBound(to: Bytef.self)
        stream.avail_in = uInt(input.count)
        stream.next_out = output.bytes.assumingMemoryBound(to: Bytef.self)
        stream.avail_out = uInt(output.capacity)
        let rc = deflate(&stream, block.isLast ? Z_FINISH : Z_SYNC_FLUSH)
        let finished = block.isLast ? rc == Z_STREAM_END : (rc == Z_OK && stream.avail_in == 0 && stream.avail_out > 0)
        guard finished else { throw StoreBackupError.archiveWrite(reason: "zlib deflate failed (\(rc))") }
        output.count = output.capacity - Int(stream.avail_out)
        block.output = output
        block.input = nil
        input.recycle()
    }
}
