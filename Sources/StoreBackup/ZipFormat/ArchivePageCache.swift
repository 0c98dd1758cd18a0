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
final class ArchivePageCache: Sendable {
    private let descriptor: Int32

    /// nil when the file cannot be opened (then nothing is dropped).
    init?(path: String) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
    }

    deinit { close(descriptor) }

    /// Drops what is cached of the archive's bytes in [offset, offset + count).
    func drop(offset: Int64, count: Int64) {
        guard offset >= 0, count > 0 else { return }
        _ = posix_fadvise(descriptor, off_t(offset), off_t(count), POSIX_FADV_DONTNEED)
    }

    /// Drops an entry's local header and data (from its central directory record).
    func drop(_ entry: ArchiveEntry) {
        drop(offset: entry.archiveOffset, count: Self.headerAllowance + entry.compressedSize)
    }

    /// The local header's fixed part, name and extra fields, roughly: the exact length is in
    /// the local header, which restore does not read itself (libzip does).
    static let headerAllowance: Int64 = 30 + 1024
}
