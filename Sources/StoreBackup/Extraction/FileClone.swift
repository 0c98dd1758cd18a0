import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies a file of the live store into the tree a delta restore builds: the file system
/// shares the blocks where it can (`FICLONE`), else the kernel copies them
/// (`copy_file_range`), else they are read and written here. The caller then hashes the copy
/// against the manifest: what counts is the copy's bytes, whatever the live file did meanwhile.
enum FileClone {
    /// How a copy was made.
    enum Method: Sendable {
        case clone, kernelCopy, readWrite
    }

    /// Copies `size` bytes of `source` into `target` (empty, open for writing); `buffer` is
    /// for the read-and-write fallback. Fewer bytes are copied when the source is shorter.
    static func copy(
        from source: Int32, to target: Int32, size: Int64, buffer: UnsafeMutableRawBufferPointer, path: String
    ) throws -> Method {
        // A clone takes the whole file, whatever its size now: the hash says whether it is the one wanted.
        if size > 0, sb_clone_file(target, source) == 0 { return .clone }
        var done: Int64 = 0
        var method = Method.kernelCopy
        while done < size {
            let copied = sb_copy_range(source, target, done, size - done)
            if copied > 0 {
                done += copied
                continue
            }
            if copied == 0 { return method }
            if errno == EINTR { continue }
            // Not on this file system or kernel: the plain way, from where the kernel stopped.
            guard done == 0, [ENOSYS, EXDEV, EINVAL, EOPNOTSUPP, EPERM].contains(errno) else {
                throw StoreBackupError.io(path: path, operation: "copy", errno: errno)
            }
            method = .readWrite
            break
        }
        guard method == .readWrite else { return method }
        while done < size {
            let want = Int(min(Int64(buffer.count), size - done))
            let got = try PositionedRead.some(
                source, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: done, path: path, operation: "read")
            if got == 0 { break }
            try FileSystem.write(target, UnsafeRawBufferPointer(rebasing: buffer[0..<got]), at: done, path: path)
            done += Int64(got)
        }
        return method
    }
}
