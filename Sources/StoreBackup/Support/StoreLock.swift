import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One storebackup command per stores directory at a time.
///
/// The lock file sits beside the stores directory (not inside it) because restore
/// swaps the directory itself. `flock` locks die with the process, so a crashed
/// command never leaves the store locked; the file's text only says who holds it.
final class StoreLock: Sendable {
    private let fd: Int32
    /// The lock file, beside the stores directory: `.<name>.storebackup-lock`.
    let path: String

    /// Takes the lock or throws `storeLocked` naming the holder.
    init(storesDirectory: String, purpose: String) throws {
        let directory = FileSystem.absolutePath(storesDirectory)
        let parent = FileSystem.parentDirectory(of: directory)
        try FileSystem.createDirectories(parent)
        path = parent + "/." + FileSystem.lastComponent(of: directory) + ".storebackup-lock"
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreBackupError.io(path: path, operation: "open lock file", errno: errno) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = Self.readHolder(fd: fd)
            close(fd)
            throw StoreBackupError.storeLocked(path: directory, holder: holder)
        }
        let text = "pid \(getpid()) on \(FileSystem.hostName): \(purpose), since \(UTCTimestamp.iso8601(Date()))\n"
        ftruncate(fd, 0)
        _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    private static func readHolder(fd: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = buffer.withUnsafeMutableBytes { (try? PositionedRead.some(fd, into: $0, at: 0, path: "(lock file)")) ?? 0 }
        guard count > 0 else { return "unknown holder" }
        return String(decoding: buffer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    deinit {
        ftruncate(fd, 0)
        flock(fd, LOCK_UN)
        close(fd)
    }
}
