import CZip
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The file a new archive is written to, as libzip writes it through a source of ours.
///
/// libzip's own file source writes through stdio, one `write` per 8 KiB piece it copies
/// (a system call for every 8 KiB of the archive), into a temporary of its own named with
/// random bytes from OpenSSL, and keeps the descriptor to itself. Here libzip's writes
/// gather in a 1 MiB buffer written out with `pwrite`; its seeks back to rewrite a local
/// header patch the buffer, or the file when the header is already out; and the file is
/// `path` itself (the caller's temporary, which the caller removes on failure), opened
/// here so that its writeback can be paced from the start (``WritebackPacer``).
///
/// One file can take several libzip archives in turn (``SegmentedArchive``): each starts at
/// ``segmentStart`` and sees only itself (offset 0 is its first byte).
///
/// Used by the one thread that closes the archive (libzip calls it from `zip_close`).
final class ArchiveOutputFile {
    let path: String
    /// The open file, until libzip frees the source.
    private(set) var descriptor: Int32
    /// Told of every byte that reaches the file.
    var wroteToFile: ((Int) -> Void)?
    private let buffer: UnsafeMutableRawPointer
    private static let bufferCapacity = 1 << 20
    /// Where in the file the buffer's first byte goes, and how many bytes it holds.
    private var bufferStart: Int64 = 0
    private var bufferCount = 0
    /// libzip's write position, and the end of what it has written so far (in the file).
    private var position: Int64 = 0
    private(set) var end: Int64 = 0
    /// Where the archive libzip writes now starts in the file.
    private(set) var segmentStart: Int64 = 0
    private var error = zip_error_t()

    /// Creates `path` (which must not exist) with the mode libzip would give it.
    init(path: String) throws {
        self.path = path
        descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o666)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        buffer = .allocate(byteCount: Self.bufferCapacity, alignment: 4096)
        zip_error_init(&error)
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
        buffer.deallocate()
        zip_error_fini(&error)
    }

    /// A libzip handle that writes a new archive into this file when it is closed.
    func openHandle() throws -> OpaquePointer {
        var openError = zip_error_t()
        zip_error_init(&openError)
        defer { zip_error_fini(&openError) }
        let context = Unmanaged.passRetained(self).toOpaque()
        guard let source = zip_source_function_create(archiveOutputCallback, context, &openError) else {
            Unmanaged<ArchiveOutputFile>.fromOpaque(context).release()
            throw StoreBackupError.archiveWrite(reason: "\(path): \(String(cString: zip_error_strerror(&openError)))")
        }
        guard let handle = zip_open_from_source(source, ZIP_CREATE | ZIP_EXCL, &openError) else {
            zip_source_free(source)
            throw StoreBackupError.archiveWrite(reason: "\(path): \(String(cString: zip_error_strerror(&openError)))")
        }
        return handle
    }

    /// Lets the next libzip archive (or ``append(_:)``) start at `offset`, which must not be
    /// past what is written; anything after it is written over or cut off by ``finish()``.
    func startSegment(at offset: Int64) throws {
        try flush()
        precondition(offset >= 0 && offset <= end)
        segmentStart = offset
        position = offset
        end = offset
        bufferStart = offset
    }

    /// Writes `bytes` at the write position, after whatever libzip wrote.
    func append(_ bytes: [UInt8]) throws {
        guard !bytes.isEmpty else { return }
        try bytes.withUnsafeBytes { try write($0.baseAddress!, count: $0.count) }
    }

    /// Writes out what is buffered and cuts the file at the end of what was written.
    func finish() throws {
        try flush()
        guard ftruncate(descriptor, off_t(end)) == 0 else {
            throw StoreBackupError.io(path: path, operation: "truncate", errno: errno)
        }
    }

    /// `count` bytes at `offset` of the file, once written out (``startSegment(at:)`` or a
    /// commit flushed them).
    func readBack(at offset: Int64, count: Int) throws -> [UInt8] {
        let bytes = try FileArchiveBytes(descriptor: descriptor, size: end).read(at: offset, count: count)
        guard bytes.count == count else { throw StoreBackupError.io(path: path, operation: "read", errno: EIO) }
        return bytes
    }

    /// Copies libzip's bytes at the write position: into the buffer when they continue it or
    /// fall inside it, else the buffer goes out first and starts again at the position.
    private func write(_ bytes: UnsafeRawPointer, count: Int) throws {
        var done = 0
        while done < count {
            let offsetInBuffer = position - bufferStart
            guard offsetInBuffer >= 0, offsetInBuffer <= Int64(bufferCount), offsetInBuffer < Int64(Self.bufferCapacity) else {
                try flush()
                bufferStart = position
                continue
            }
            let at = Int(offsetInBuffer)
            let chunk = min(count - done, Self.bufferCapacity - at)
            (buffer + at).copyMemory(from: bytes + done, byteCount: chunk)
            bufferCount = max(bufferCount, at + chunk)
            done += chunk
            position += Int64(chunk)
            end = max(end, position)
            if bufferCount == Self.bufferCapacity {
                try flush()
                bufferStart = position
            }
        }
    }

    /// Writes the buffer out at its place in the file and empties it.
    private func flush() throws {
        var written = 0
        while written < bufferCount {
            let wrote = pwrite(descriptor, buffer + written, bufferCount - written, off_t(bufferStart) + off_t(written))
            if wrote < 0 && errno == EINTR { continue }
            guard wrote > 0 else { throw StoreBackupError.io(path: path, operation: "write", errno: wrote < 0 ? errno : EIO) }
            written += wrote
        }
        wroteToFile?(bufferCount)
        bufferStart += Int64(bufferCount)
        bufferCount = 0
    }

    private func failed(_ failure: Error) -> Int64 {
        if case StoreBackupError.io(_, _, let code) = failure {
            zip_error_set(&error, ZIP_ER_WRITE, code)
        } else {
            zip_error_set(&error, ZIP_ER_WRITE, EIO)
        }
        return -1
    }

    fileprivate func handle(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        switch command {
        case ZIP_SOURCE_STAT:
            // A new archive: libzip takes "no such file" to mean it starts an empty one.
            zip_error_set(&error, ZIP_ER_READ, ENOENT)
            return -1
        case ZIP_SOURCE_BEGIN_WRITE:
            position = segmentStart
            end = segmentStart
            return 0
        case ZIP_SOURCE_WRITE:
            guard let data else { return 0 }
            do {
                try write(data, count: Int(length))
                return Int64(length)
            } catch {
                return failed(error)
            }
        case ZIP_SOURCE_SEEK_WRITE:
            let offset = zip_source_seek_compute_offset(
                UInt64(position - segmentStart), UInt64(end - segmentStart), data, length, &error)
            guard offset >= 0 else { return -1 }
            position = segmentStart + offset
            return 0
        case ZIP_SOURCE_TELL_WRITE:
            return position - segmentStart
        case ZIP_SOURCE_COMMIT_WRITE:
            do {
                try flush()
                return 0
            } catch {
                return failed(error)
            }
        case ZIP_SOURCE_ROLLBACK_WRITE, ZIP_SOURCE_REMOVE:
            // What was written stays until the caller removes the whole file.
            bufferCount = 0
            return 0
        case ZIP_SOURCE_ERROR:
            return zip_error_to_data(&error, data, length)
        case ZIP_SOURCE_SUPPORTS:
            return ZipSource.commandMask([
                ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
                ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_SUPPORTS, ZIP_SOURCE_BEGIN_WRITE, ZIP_SOURCE_WRITE,
                ZIP_SOURCE_COMMIT_WRITE, ZIP_SOURCE_ROLLBACK_WRITE, ZIP_SOURCE_SEEK_WRITE, ZIP_SOURCE_TELL_WRITE,
                ZIP_SOURCE_REMOVE,
            ])
        case ZIP_SOURCE_FREE:
            Unmanaged.passUnretained(self).release()
            return 0
        default:
            // Reading: a new archive has nothing libzip needs to read back.
            zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
            return -1
        }
    }
}

private let archiveOutputCallback: zip_source_callback = { context, data, length, command in
    Unmanaged<ArchiveOutputFile>.fromOpaque(context!).takeUnretainedValue().handle(command: command, data: data, length: length)
}
