import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Which regular files changed since the last backup. A file is taken as unchanged
/// without reading it only when its size, mtime, ctime and inode all match the state
/// (restic's rule); otherwise it is read and its SHA-256 compared.
enum ChangeDetector {
    /// The stat fields of a store file now (nil when it vanished).
    static func stat(_ item: StoreItem) -> FileStat? {
        var info = Glibc.stat()
        let rc = EscapedName.withSystemPath(item.absolutePath) { lstat($0, &info) }
        guard rc == 0 else { return nil }
        return FileStat(
            size: Int64(info.st_size),
            mtimeNanoseconds: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            ctimeNanoseconds: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec),
            inode: UInt64(info.st_ino))
    }

    struct Result: Sendable {
        /// Every file's stat, taken before anything was read (by path), as the next backup
        /// may trust it (see ``trustable(_:takenAt:)``).
        var stats: [String: FileStat]
        /// Files whose content is the last backup's: their size and SHA-256 as the last
        /// backup recorded them (by path).
        var unchanged: [String: FileRecord]
    }

    /// Stats `files` and, against `known` (nil: a full backup, nothing is compared), finds
    /// the unchanged ones, hashing on `workers` threads the files whose stat differs.
    ///
    /// A file that changes while it is hashed (its stat after the read differs from the one
    /// before, or it did not hold as many bytes as that stat said) counts as changed, so it
    /// goes into the backup whole: a size and a hash always describe the same bytes.
    static func detect(
        files: [StoreItem], known: [String: FileRecord]?, workers: Int, cancel: CancellationFlag
    ) throws -> Result {
        let outcomes = try WorkerPool.map(files, name: "storebackup-changes", width: workers, cancel: cancel) {
            item -> (FileStat?, FileRecord?) in
            guard let now = stat(item) else { return (nil, nil) }
            let taken = Self.wallClockNanoseconds()
            let trusted = trustable(now, takenAt: taken)
            guard let known, let record = known[item.relativePath], record.stat.size == now.size else { return (trusted, nil) }
            if record.stat == now { return (trusted, record) }
            TestPausePoint.reach("change-detector-stat")
            let read = try contentSHA256(item.absolutePath)
            guard read.bytes == now.size, stat(item) == now, read.sha256 == record.sha256 else { return (trusted, nil) }
            return (trusted, record)
        }
        var result = Result(stats: [:], unchanged: [:])
        for (item, outcome) in zip(files, outcomes) {
            if let stat = outcome.0 { result.stats[item.relativePath] = stat }
            if let record = outcome.1 { result.unchanged[item.relativePath] = record }
        }
        return result
    }

    /// How far back from the moment of a stat a change may lie and still share its time
    /// stamps with a later change: file times come from a coarse clock (a few milliseconds
    /// per tick), and some file systems keep whole seconds.
    static let racyWindowNanoseconds: Int64 = 2_000_000_000

    /// `stat` as the chain state may record it: a file changed within the racy window before
    /// the stat could change again, to the same size, without its times moving (git's
    /// "racily clean" entries), so such a stat is recorded with an mtime no stat has, and
    /// the next backup reads the file instead of trusting its stat.
    static func trustable(_ stat: FileStat, takenAt now: Int64) -> FileStat {
        guard max(stat.mtimeNanoseconds, stat.ctimeNanoseconds) >= now - racyWindowNanoseconds else { return stat }
        var racy = stat
        racy.mtimeNanoseconds = Int64.min
        return racy
    }

    static func wallClockNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// A file's SHA-256 and the number of bytes it was taken over, read in 1 MiB chunks
    /// (`path` escaped, as StoreItem's).
    static func contentSHA256(_ path: String) throws -> (sha256: String, bytes: Int64) {
        let descriptor = EscapedName.withSystemPath(path) { open($0, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        defer { close(descriptor) }
        var hasher = SHA256()
        var bytes: Int64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let got = read(descriptor, buffer.baseAddress, buffer.count)
            if got < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "read", errno: errno)
            }
            if got == 0 { break }
            bytes += Int64(got)
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer.prefix(got)))
        }
        return (FileDigest.hex(hasher.finalize()), bytes)
    }
}
