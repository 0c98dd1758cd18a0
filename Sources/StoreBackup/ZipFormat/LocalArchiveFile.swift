import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A backup file on this machine, as libzip reads it through ``ZipSource``: with `pread`
/// and read-ahead windows per handle (``ReadAheadWindows``). libzip's own file source
/// reads through stdio: an `lseek` and a 4 KiB `read` or two for each local header it
/// checks on opening and again for each small entry it reads, several system calls per file
/// of a store of many small files.
final class LocalArchiveFile: PositionedBytes, Sendable {
    let path: String
    let size: Int64
    /// Read with `pread` only, so that threads may share it.
    let descriptor: Int32

    /// Reads shorter than this are served from windows of this size.
    var readAheadBytes: Int { 64 << 10 }

    /// nil when the file cannot be opened or is not a regular file (then libzip opens it
    /// itself and says why it cannot).
    init?(path: String) {
        self.path = path
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            return nil
        }
        size = Int64(info.st_size)
    }

    deinit { close(descriptor) }

    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset < size, buffer.count > 0 else { return 0 }
        return try PositionedRead.some(descriptor, into: buffer, at: offset, path: path)
    }

    /// Reads until `buffer` is full or the file ends; returns the count.
    func readFully(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        var done = 0
        while done < buffer.count {
            let got = try read(at: offset + Int64(done), into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
            if got == 0 { break }
            done += got
        }
        return done
    }
}
