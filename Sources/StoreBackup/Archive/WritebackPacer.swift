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
/// two chunks (512 KiB, about a millisecond of disk time) are ever queued ahead of the
/// app's own fsyncs. The archive is produced at a fraction of the disk's speed, so the
/// wait costs little. (Measured with a `synchronous=FULL` writer beside 100 MiB written
/// at create's pace: 1 MiB steps put its p99 commit at 3.8 × idle, 256 KiB steps at 2.6 ×.)
///
/// In that mode the pages are also dropped from the page cache once they are on disk
/// (`POSIX_FADV_DONTNEED`), except the last MiB, where libzip still rewrites local headers:
/// an archive is read rarely, so it should not push the app's own data out of the cache,
/// and the kernel hands the freed pages straight back to the next writes. (Fresh pages are
/// dear on some virtual machines: on this benchmark's, where the host reclaims free guest
/// memory, writing 800 MiB into never-used page cache took 2.4-3 s of system time against
/// 0.2 s into recycled pages; the 2 GiB create spent a quarter of its CPU there.)
// Unchecked: `descriptor`, `pending` and the started range are used only while `lock` is held.
final class WritebackPacer: @unchecked Sendable {
    /// How many bytes may be written between two writeback starts.
    private var interval: Int { boundInFlight ? 256 << 10 : 1 << 20 }

    private let lock = NSLock()
    private var descriptor: Int32
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
    /// For a file opened by someone else (libzip): found on first use.
    private let findDescriptor: (() -> Int32?)?

    /// Paces writeback of a file we write through `descriptor` (we keep ownership).
    init(descriptor: Int32, boundInFlight: Bool = false) {
        self.descriptor = descriptor
        self.boundInFlight = boundInFlight
        ownsDescriptor = false
        findDescriptor = nil
    }

    /// Paces writeback of the temporary file libzip writes an archive to.
    ///
    /// libzip (1.7, `zip_source_file_stdio_named.c`) writes `<archive>.XXXXXX` beside the
    /// archive and renames it at the end of `zip_close`; it exposes no descriptor. So the
    /// file is found among this process's open files (`/proc/self/fd`) and opened a second
    /// time. When it is not found (another platform or libzip), writeback is left to the kernel.
    init(libzipTemporaryFor archivePath: String, boundInFlight: Bool = true) {
        descriptor = -1
        self.boundInFlight = boundInFlight
        ownsDescriptor = true
        let directory = (archivePath as NSString).deletingLastPathComponent
        let resolved = URL(fileURLWithPath: directory).resolvingSymlinksInPath().path
        let prefix = resolved + "/" + (archivePath as NSString).lastPathComponent + "."
        findDescriptor = { Self.openOwnCopy(ofOpenFileWithPrefix: prefix) }
    }

    deinit {
        if ownsDescriptor && descriptor >= 0 { close(descriptor) }
    }

    /// Records `count` bytes written; every step, starts writeback of what is dirty.
    func wrote(_ count: Int) {
        lock.lock()
        defer { lock.unlock() }
        pending += count
        guard pending >= interval else { return }
        pending = 0
        if descriptor < 0, let find = findDescriptor, let found = find() { descriptor = found }
        guard descriptor >= 0 else { return }
        guard boundInFlight else {
            // Offset 0, count 0: the whole file; pages already under writeback are skipped.
            _ = sb_start_writeback(descriptor, 0, 0)
            return
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return }
        let end = Int64(info.st_size)
        guard end > startedTo else { return }
        _ = sb_start_writeback(descriptor, startedTo, end - startedTo)
        // The previous chunk has had a whole interval to finish; wait for whatever is left.
        if startedTo > startedFrom { _ = sb_wait_writeback(descriptor, startedFrom, startedTo - startedFrom) }
        // Clean now, so DONTNEED frees it (it never drops a dirty page: nothing can be lost).
        let droppable = min(startedTo, end - Self.rewrittenTail)
        if droppable > droppedTo {
            _ = posix_fadvise(descriptor, off_t(droppedTo), off_t(droppable - droppedTo), POSIX_FADV_DONTNEED)
            droppedTo = droppable
        }
        startedFrom = startedTo
        startedTo = end
    }

    private static func openOwnCopy(ofOpenFileWithPrefix prefix: String) -> Int32? {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return nil }
        for entry in entries {
            let link = "/proc/self/fd/" + entry
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link),
                  target.hasPrefix(prefix), target.count == prefix.count + 6 else { continue }
            let fd = open(link, O_RDONLY | O_CLOEXEC)
            if fd >= 0 { return fd }
        }
        return nil
    }
}
