import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Lets the kernel drop an archive's pages from the page cache once restore has read them.
///
/// A restore (or verify) reads each entry of a backup once. Left cached, the archive would
/// push the app's own data out of memory, and the kernel could not give its pages straight
/// back to the files being written. Dropped as it is read, those pages are reused at once,
/// and writing into recycled pages is much cheaper than into never-used ones where the host
/// reclaims free guest memory. `POSIX_FADV_DONTNEED` is advice: it never changes
/// what a later read returns, so a wrong range costs at most a read from disk.
///
/// Small entries are dropped a few MiB at a time, not one by one: a system call per file
/// of a store of many small files was a tenth of restore's calls.
final class ArchivePageCache: Sendable {
    private let descriptor: Int32
    /// The span of the small entries read since the last drop.
    private let pending = Locked(PendingSpan())

    private struct PendingSpan {
        var lower = Int64.max
        var upper: Int64 = 0
        var bytes: Int64 = 0
    }

    /// How much of small entries is read before they are dropped together.
    static let batchBytes: Int64 = 4 << 20

    /// nil when the file cannot be opened (then nothing is dropped).
    init?(path: String) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
    }

    deinit {
        let span = pending.withLock { $0 }
        if span.bytes > 0 { drop(offset: span.lower, count: span.upper - span.lower) }
        close(descriptor)
    }

    /// Drops what is cached of the archive's bytes in [offset, offset + count).
    func drop(offset: Int64, count: Int64) {
        guard offset >= 0, count > 0 else { return }
        _ = posix_fadvise(descriptor, off_t(offset), off_t(count), POSIX_FADV_DONTNEED)
    }

    /// Drops an entry's local header and data (from its central directory record); a small
    /// entry's together with the small entries read before it, once they add up to
    /// ``batchBytes``. Entries are read roughly in the archive's order, so the span between
    /// them is mostly theirs.
    func drop(_ entry: ArchiveEntry) {
        let count = Self.headerAllowance + entry.compressedSize
        guard count < Self.batchBytes else { return drop(offset: entry.archiveOffset, count: count) }
        let span: PendingSpan? = pending.withLock { span in
            span.lower = min(span.lower, entry.archiveOffset)
            span.upper = max(span.upper, entry.archiveOffset + count)
            span.bytes += count
            guard span.bytes >= Self.batchBytes else { return nil }
            defer { span = PendingSpan() }
            return span
        }
        if let span { drop(offset: span.lower, count: span.upper - span.lower) }
    }

    /// The local header's fixed part, name and extra fields, roughly: the exact length is in
    /// the local header, which restore does not read itself (libzip does).
    static let headerAllowance: Int64 = 30 + 1024
}
