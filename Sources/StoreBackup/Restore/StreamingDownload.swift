import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A remote backup downloaded into restore's staging file by several ranged requests at
/// once, while restore already reads the file (``ArrivingArchive``): each request fetches
/// one chunk a reader waits for (the reader's ``BackupRangeReader/pieceBytes``: 2 MiB,
/// 8 MiB over SFTP), or up to 8 MiB of chunks in a row nobody waits for yet, and writes
/// them at their offset as their bytes come (no answer is held in memory), and
/// ``ArrivingFile`` says which chunks are there and which one to fetch next (the one a
/// reader waits for first).
///
/// Every answer is checked as any ranged read's is (``BackupRangeReader``: `206` or a
/// matching `Content-Range`, the total size, the exact length) and retried within the
/// destination's retry budget; a chunk that fails for good fails the whole download, and
/// every reader waiting for bytes with it.
final class StreamingDownload: Sendable {
    /// The staging file.
    let path: String
    /// Which chunks of it have arrived.
    let arrival: ArrivingFile
    private let descriptor: Int32
    private let workers: WorkerPool.Group
    private let cancel = CancellationFlag()
    private let stopped = Locked(false)

    /// Requests in flight at once: enough to fill a link whose round trips would leave one
    /// request's stream idle, few enough to stay polite to a server.
    static let parallelRequests = 4

    /// Whether restore downloads and unpacks at once (`STOREBACKUP_STREAMING_RESTORE=off`
    /// downloads first, as before, for comparing the two).
    static var isEnabled: Bool { ProcessInfo.processInfo.environment["STOREBACKUP_STREAMING_RESTORE"] != "off" }

    /// Creates `path` (which must not exist), reserves the backup's size on disk (so the
    /// free-space check before unpacking sees it taken), and starts the requests.
    init(ranges: BackupRangeReader, to path: String, progress: ProgressHandler?) throws {
        self.path = path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        if sb_reserve(descriptor, ranges.size) != 0 {
            let reserveError = errno
            // A filesystem that cannot reserve gets a sparse file of the final size instead.
            guard reserveError != ENOSPC, ftruncate(descriptor, off_t(ranges.size)) == 0 else {
                close(descriptor)
                throw StoreBackupError.io(path: path, operation: "reserve space for", errno: reserveError == ENOSPC ? ENOSPC : errno)
            }
        }
        self.descriptor = descriptor
        let arrival = ArrivingFile(size: ranges.size, chunkBytes: ranges.pieceBytes)
        self.arrival = arrival
        let cancel = self.cancel
        workers = WorkerPool.start(name: "storebackup-download", width: min(Self.parallelRequests, max(1, arrival.chunkCount))) { _ in
            // Chunks nobody waits for yet go several to a request, up to the most one asks for.
            let most = Int(max(1, BackupRangeReader.maxReadBytes / ranges.pieceBytes))
            while let chunks = arrival.nextChunks(most: most) {
                let range = arrival.range(ofChunk: chunks.lowerBound).lowerBound..<arrival.range(ofChunk: chunks.upperBound - 1).upperBound
                do {
                    try cancel.throwIfCancelled()
                    // Written in place as the answer arrives; arrived only once it is whole and checked.
                    try ranges.read(range, into: descriptor, cancel: cancel)
                    for chunk in chunks { arrival.markArrived(chunk) }
                    progress?(BackupProgress(phase: .downloading, bytesDone: arrival.arrivedBytes, bytesTotal: arrival.size))
                } catch {
                    arrival.fail(error)
                    return
                }
            }
        }
    }

    deinit { stop() }

    /// Waits until every byte is in the file; throws the download's failure instead, or
    /// `cancelled` once `cancel` is set.
    func finish(cancel: CancellationFlag) throws {
        arrival.fetchEverything()
        try arrival.waitUntilComplete(cancel: cancel)
        workers.join()
    }

    /// Stops the requests still running (their readers throw `cancelled`), waits for
    /// them, and closes the file. The caller removes it.
    func stop() {
        guard
            stopped.withLock({ done in
                defer { done = true }; return !done
            })
        else { return }
        cancelNow()
        workers.join()
        close(descriptor)
    }

    /// Cancels the requests and lets every waiting reader go, without waiting.
    func cancelNow() {
        cancel.cancel()
        arrival.fail(StoreBackupError.cancelled)
    }
}
