import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Reads at a position (`pread`), the one way the library does: a call interrupted by a
/// signal is made again, a short read is followed by another where the whole buffer is
/// wanted, and a failed read is thrown naming the file.
enum PositionedRead {
    /// One read of up to `buffer.count` bytes: the count read, 0 at the end of the file.
    static func some(
        _ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String,
        operation: String = "read"
    ) throws -> Int {
        guard buffer.count > 0 else { return 0 }
        while true {
            let got = pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset))
            if got >= 0 { return got }
            if errno != EINTR { throw StoreBackupError.io(path: path, operation: operation, errno: errno) }
        }
    }

    /// Reads until `buffer` is full or the file ends: the count, short only at the end of the file.
    static func fill(
        _ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String,
        operation: String = "read"
    ) throws -> Int {
        var done = 0
        while done < buffer.count {
            let got = try some(
                descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: offset + Int64(done), path: path,
                operation: operation)
            if got == 0 { break }
            done += got
        }
        return done
    }

    /// Opens `path` for reading (not through a link) and reads its first `headerSize` bytes:
    /// the descriptor (the caller closes it), the bytes read (fewer when the file is shorter)
    /// and the file's size.
    static func openWithHeader(_ path: String, headerSize: Int) throws -> (descriptor: Int32, header: [UInt8], size: Int64) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        var header = [UInt8](repeating: 0, count: headerSize)
        var info = stat()
        let got = header.withUnsafeMutableBytes { (try? fill(descriptor, into: $0, at: 0, path: path)) ?? 0 }
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw StoreBackupError.io(path: path, operation: "stat", errno: code)
        }
        return (descriptor, Array(header.prefix(got)), Int64(info.st_size))
    }

    /// Reads exactly `buffer.count` bytes; a file that ends first is an I/O error (EIO).
    static func exactly(
        _ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String,
        operation: String = "read"
    ) throws {
        guard try fill(descriptor, into: buffer, at: offset, path: path, operation: operation) == buffer.count else {
            throw StoreBackupError.io(path: path, operation: operation, errno: EIO)
        }
    }
}
