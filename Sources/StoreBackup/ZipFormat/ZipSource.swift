import CZip
import Foundation

/// An archive's bytes that a libzip source reads by offset: a remote archive read in
/// ranges (``RangedArchive``), or a downloaded file still arriving (``ArrivingArchive``).
protocol PositionedBytes: AnyObject, Sendable {
    /// The archive's size in bytes.
    var size: Int64 { get }
    /// Copies bytes at `offset` into `buffer`, as many as are at hand at once (at least one
    /// before the end); 0 at the end of the archive. Blocks as long as the bytes take.
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// Reads shorter than this are served from a window of this many bytes read at once
    /// (0: none; a remote or arriving archive reads only what is asked for).
    var readAheadBytes: Int { get }
}

extension PositionedBytes {
    var readAheadBytes: Int { 0 }
}

/// libzip handles over ``PositionedBytes``.
enum ZipSource {
    /// The bitmask a source answers ZIP_SOURCE_SUPPORTS with (libzip's
    /// `zip_source_make_command_bitmap`, which is variadic C, out of Swift's reach).
    static func commandMask(_ commands: [zip_source_cmd_t]) -> Int64 {
        commands.reduce(Int64(0)) { $0 | (Int64(1) << Int64($1.rawValue)) }
    }

    /// A read-only libzip handle over `bytes`; without `ZIP_CHECKCONS` in `flags`, the caller
    /// checks local headers its own way. `lastFailure` says why a read failed, when one did:
    /// libzip reports only that it failed, which would read as a damaged archive.
    static func openHandle(
        over bytes: any PositionedBytes, backupName: String, flags: Int32 = ZIP_RDONLY, lastFailure: () -> StoreBackupError?
    ) throws -> OpaquePointer {
        var error = zip_error_t()
        zip_error_init(&error)
        defer { zip_error_fini(&error) }
        let reader = PositionedSourceReader(archive: bytes)
        let context = Unmanaged.passRetained(reader).toOpaque()
        guard let source = zip_source_function_create(positionedSourceCallback, context, &error) else {
            Unmanaged<PositionedSourceReader>.fromOpaque(context).release()
            throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_error_strerror(&error)))
        }
        let handle = ArchiveReader.openLock.withLock { zip_open_from_source(source, flags, &error) }
        guard let handle else {
            zip_source_free(source)
            if let failure = lastFailure() { throw failure }
            throw StoreBackupError.corruptArchive(
                name: backupName, reason: "not a readable ZIP archive (\(String(cString: zip_error_strerror(&error))))")
        }
        return handle
    }
}

/// One libzip source over ``PositionedBytes``: its own position, the bytes' reads, and its
/// own read-ahead windows when the bytes want them. Used by one thread at a time (the one
/// holding the libzip handle).
private final class PositionedSourceReader {
    let archive: any PositionedBytes
    var position: Int64 = 0
    var error = zip_error_t()
    /// Read-ahead windows, when the bytes want them (a file on this machine).
    private let windows: ReadAheadWindows?

    init(archive: any PositionedBytes) {
        self.archive = archive
        windows = archive.readAheadBytes > 0 ? ReadAheadWindows(windowBytes: archive.readAheadBytes) : nil
        zip_error_init(&error)
    }

    deinit { zip_error_fini(&error) }

    /// Bytes at ``position`` into `buffer`, as many as one read gives.
    private func readAtPosition(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let windows else { return try archive.read(at: position, into: buffer) }
        return try windows.read(at: position, into: buffer) { try archive.read(at: $0, into: $1) }
    }

    func handle(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        switch command {
        case ZIP_SOURCE_OPEN:
            position = 0
            return 0
        case ZIP_SOURCE_READ:
            guard let data else { return -1 }
            let buffer = UnsafeMutableRawBufferPointer(start: data, count: Int(min(length, UInt64(Int.max))))
            var done = 0
            do {
                // Filled as far as the archive goes: libzip takes a short read for its end.
                while done < buffer.count {
                    let got = try readAtPosition(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
                    if got == 0 { break }
                    done += got
                    position += Int64(got)
                }
            } catch {
                if case StoreBackupError.cancelled = error {
                    zip_error_set(&self.error, ZIP_ER_CANCELLED, 0)
                } else {
                    zip_error_set(&self.error, ZIP_ER_READ, EIO)
                }
                return -1
            }
            return Int64(done)
        case ZIP_SOURCE_CLOSE:
            return 0
        case ZIP_SOURCE_STAT:
            guard let data, length >= UInt64(MemoryLayout<zip_stat_t>.size) else { return -1 }
            let stat = data.assumingMemoryBound(to: zip_stat_t.self)
            zip_stat_init(stat)
            stat.pointee.valid = UInt64(ZIP_STAT_SIZE)
            stat.pointee.size = UInt64(archive.size)
            return Int64(MemoryLayout<zip_stat_t>.size)
        case ZIP_SOURCE_SEEK:
            let offset = zip_source_seek_compute_offset(UInt64(position), UInt64(archive.size), data, length, &error)
            guard offset >= 0 else { return -1 }
            position = offset
            return 0
        case ZIP_SOURCE_TELL:
            return position
        case ZIP_SOURCE_ERROR:
            return zip_error_to_data(&error, data, length)
        case ZIP_SOURCE_SUPPORTS:
            return ZipSource.commandMask([
                ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
                ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_SUPPORTS,
            ])
        case ZIP_SOURCE_FREE:
            Unmanaged.passUnretained(self).release()
            return 0
        default:
            zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
            return -1
        }
    }
}

private let positionedSourceCallback: zip_source_callback = { context, data, length, command in
    Unmanaged<PositionedSourceReader>.fromOpaque(context!).takeUnretainedValue().handle(command: command, data: data, length: length)
}
