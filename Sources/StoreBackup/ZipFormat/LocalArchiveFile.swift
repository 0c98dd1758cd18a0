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

    /// Runs `body` on the `count` bytes at `offset` mapped into memory, without copying
    /// them out of the page cache; nil (and `body` not run) when they lie beyond the file's
    /// end or cannot be mapped: then read them.
    func withMapping<T>(at offset: Int64, count: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T? {
        guard count > 0, offset >= 0, offset + Int64(count) <= size else { return nil }
        let page = Int64(sysconf(Int32(_SC_PAGESIZE)))
        let start = offset - offset % page
        // A page more when the file has it: a decoder that loads its input a word at a time
        // may touch bytes past the end it was given.
        let length = Int(min(offset + Int64(count) + page, size) - start)
        let mapped = mmap(nil, length, PROT_READ, MAP_SHARED, descriptor, off_t(start))
        guard let mapped, mapped != MAP_FAILED else { return nil }
        defer { munmap(mapped, length) }
        return try body(UnsafeRawBufferPointer(start: mapped + Int(offset - start), count: count))
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
