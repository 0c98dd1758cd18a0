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
        /// Every file's stat, taken before anything was read (by path).
        var stats: [String: FileStat]
        /// Files whose content is the last backup's: their SHA-256 (by path).
        var unchanged: [String: String]
    }

    /// Stats `files` and, against `known` (nil: a full backup, nothing is compared), finds
    /// the unchanged ones, hashing on `workers` threads the files whose stat differs.
    static func detect(
        files: [StoreItem], known: [String: FileRecord]?, workers: Int, cancel: CancellationFlag
    ) throws -> Result {
        let outcomes = try WorkerPool.map(files, name: "storebackup-changes", width: workers, cancel: cancel) {
            item -> (FileStat?, String?) in
            guard let now = stat(item) else { return (nil, nil) }
            guard let known, let record = known[item.relativePath], record.stat.size == now.size else { return (now, nil) }
            if record.stat == now { return (now, record.sha256) }
            let sha256 = try contentSHA256(item.absolutePath)
            return (now, sha256 == record.sha256 ? sha256 : nil)
        }
        var result = Result(stats: [:], unchanged: [:])
        for (item, outcome) in zip(files, outcomes) {
            if let stat = outcome.0 { result.stats[item.relativePath] = stat }
            if let sha256 = outcome.1 { result.unchanged[item.relativePath] = sha256 }
        }
        return result
    }

    /// A file's SHA-256, read in 1 MiB chunks (`path` escaped, as StoreItem's).
    static func contentSHA256(_ path: String) throws -> String {
        let descriptor = EscapedName.withSystemPath(path) { open($0, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        defer { close(descriptor) }
        var hasher = SHA256()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let got = read(descriptor, buffer.baseAddress, buffer.count)
            if got < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "read", errno: errno)
            }
            if got == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer.prefix(got)))
        }
        return FileDigest.hex(hasher.finalize())
    }
}
