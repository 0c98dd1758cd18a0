import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Replaces a small file so that after a crash or power cut it holds either the old
/// contents or the new ones, never a mix or nothing: a temporary beside it (scratch name,
/// `O_EXCL`), write, fsync, rename over the target, fsync the folder.
package enum DurableFile {
    /// Writes `data` to `path` durably and atomically.
    ///
    /// - Parameters:
    ///   - data: The whole new contents.
    ///   - path: The file to replace (or create); its folder must exist.
    ///   - mode: The new file's permission bits, set exactly (whatever the umask).
    /// - Throws: ``StoreBackupError/io(path:operation:errno:)``; the temporary is removed.
    package static func write(_ data: Data, to path: String, mode: mode_t = 0o600) throws {
        let parent = FileSystem.parentDirectory(of: path)
        let folder = parent.isEmpty ? "." : parent
        let temporary = ScratchFiles.path(in: folder, purpose: "write")
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: temporary, operation: "create", errno: errno) }
        do {
            defer { close(descriptor) }
            guard fchmod(descriptor, mode) == 0 else { throw StoreBackupError.io(path: temporary, operation: "chmod", errno: errno) }
            try data.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let wrote = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if wrote < 0 {
                        if errno == EINTR { continue }
                        throw StoreBackupError.io(path: temporary, operation: "write", errno: errno)
                    }
                    offset += wrote
                }
            }
            guard fsync(descriptor) == 0 else { throw StoreBackupError.io(path: temporary, operation: "fsync", errno: errno) }
            try FileSystem.rename(from: temporary, to: path)
        } catch {
            unlink(temporary)
            throw error
        }
        try FileSystem.fsync(path: folder)
    }
}
