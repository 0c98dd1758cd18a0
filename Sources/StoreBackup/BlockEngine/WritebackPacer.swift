import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Starts the kernel's writeback of a file every few MiB written to it, without waiting.
///
/// Without it, a create or restore leaves a hundred megabytes or more dirty in the page
/// cache, and the final fsync writes them all at once: the app's own commits (its WAL
/// fsyncs) queue behind that burst for hundreds of milliseconds. Written back as it
/// goes, the final fsync has little left to do and the disk queue stays short.
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux; elsewhere nothing happens.)
///
/// With `boundInFlight` (the archive, written while the app runs), the steps are 256 KiB
/// and each also waits until the chunk before the one just started is on disk, so at most
/// two chunks (about a millisecond of disk time) are ever queued ahead of the app's own
/// fsyncs; larger steps made a `synchronous=FULL` writer's commits wait longer.
///
/// In that mode the steps run on a thread of their own, which the writer only wakes: waiting
/// for the disk there had blocked the thread that feeds libzip, which is the pipeline's
/// bottleneck while it writes the blobs. If the disk falls behind, what is not yet
/// started waits in the page cache, not in the disk's queue, and the final fsync takes it.
///
/// In that mode the pages are also dropped from the page cache once they are on disk
/// (`POSIX_FADV_DONTNEED`), except the last MiB, where libzip may still rewrite a local header:
/// an archive is read rarely, so it should not push the app's own data out of the cache,
/// and the kernel hands the freed pages straight back to the next writes. (Fresh pages are
/// dear on virtual machines whose host reclaims free guest memory; docs/dev/performance.md.)
// Unchecked: `pending` and `stopping` are used only while `condition` is held; the started
// range too, or (bounded mode) only on the pacing thread.
final class WritebackPacer: @unchecked Sendable {
    /// How many bytes may be written between two writeback starts.
    private var interval: Int { boundInFlight ? 256 << 10 : 1 << 20 }

    private let condition = NSCondition()
    private var stopping = false
    /// The thread that starts and waits for writeback (bounded mode).
    private var pacing: WorkerPool.Group?
    private let descriptor: Int32
    private let ownsDescriptor: Bool
    private var pending = 0
    private let boundInFlight: Bool
    /// Where the chunk whose writeback was started last begins and ends (bounded mode).
    private var startedFrom: Int64 = 0
    private var startedTo: Int64 = 0
    /// Everything before this offset has been dropped from the page cache (bounded mode).
    private var droppedTo: Int64 = 0
    /// What stays cached behind the end of the file: libzip seeks back there to rewrite the
    /// local header of the entry it just wrote. (Dropping it would cost a read, not data.)
    private static let rewrittenTail: Int64 = 1 << 20

    /// Paces writeback of a file we write through `descriptor`. In bounded mode the pacing
    /// thread works on a duplicate of it, so that the writer may close its own whenever it likes.
    init(descriptor: Int32, boundInFlight: Bool = false) {
        self.boundInFlight = boundInFlight
        ownsDescriptor = boundInFlight
        self.descriptor = boundInFlight ? fcntl(descriptor, F_DUPFD_CLOEXEC, 0) : descriptor
        if boundInFlight {
            pacing = WorkerPool.start(name: "storebackup-writeback", width: 1) { [self] _ in runPacing() }
        }
    }

    deinit {
        if ownsDescriptor && descriptor >= 0 { close(descriptor) }
    }

    /// Ends the pacing thread (bounded mode); what is still dirty is left to the caller's
    /// fsync. Call it once the file is written or abandoned, or the thread waits for ever.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
        pacing?.join()
    }

    /// Records `count` bytes written; every step, starts writeback of what is dirty (in
    /// bounded mode, wakes the pacing thread to do it).
    func wrote(_ count: Int) {
        condition.lock()
        defer { condition.unlock() }
        pending += count
        guard pending >= interval else { return }
        if boundInFlight {
            condition.signal()
            return
        }
        pending = 0
        guard descriptor >= 0 else { return }
        // Offset 0, count 0: the whole file; pages already under writeback are skipped.
        _ = sb_start_writeback(descriptor, 0, 0)
    }

    private func runPacing() {
        while true {
            condition.lock()
            while pending < interval && !stopping { condition.wait() }
            let stop = stopping
            // One step per interval written: when the disk falls behind, the rest waits in
            // the page cache rather than in the disk's queue.
            pending -= interval
            condition.unlock()
            if stop { return }
            startNextChunk()
        }
    }

    /// Starts writeback of the next interval written, waits for the chunk before it, and
    /// drops what is on disk from the page cache. On the pacing thread only.
    private func startNextChunk() {
        guard descriptor >= 0 else { return }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return }
        let size = Int64(info.st_size)
        let end = min(size, startedTo + Int64(interval))
        guard end > startedTo else { return }
        _ = sb_start_writeback(descriptor, startedTo, end - startedTo)
        // The previous chunk has had a whole interval to finish; wait for whatever is left.
        if startedTo > startedFrom { _ = sb_wait_writeback(descriptor, startedFrom, startedTo - startedFrom) }
        // Clean now, so DONTNEED frees it (it never drops a dirty page: nothing can be lost).
        let droppable = min(startedTo, size - Self.rewrittenTail)
        if droppable > droppedTo {
            _ = posix_fadvise(descriptor, off_t(droppedTo), off_t(droppable - droppedTo), POSIX_FADV_DONTNEED)
            droppedTo = droppable
        }
        startedFrom = startedTo
        startedTo = end
    }
}
