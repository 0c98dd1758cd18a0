import CZip
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One ZIP archive written by libzip a segment at a time, so that libzip's memory follows
/// the entries of one segment and not the store's.
///
/// libzip keeps every entry it was given (about 544 bytes each, with its source and extra
/// fields) until `zip_close` has written the archive, 104 MiB for 200,000 files. Here every
/// ``entriesPerSegment`` entries the handle is closed: libzip writes its entries, its central
/// directory and end records into the file from ``ArchiveOutputFile/segmentStart``. That
/// directory is read back, each record's local header offset moved on by where the segment
/// starts (``CentralRecordRebase``) and kept in a spool file, and the next segment is
/// written over it. After the last segment the spooled records become the one central
/// directory, followed by end records as libzip writes them. Every entry's local header and
/// data are libzip's own; an archive of one segment is libzip's from end to end.
final class SegmentedArchive {
    let output: ArchiveOutputFile
    let entriesPerSegment: Int
    /// The open libzip handle of the current segment.
    private(set) var handle: OpaquePointer
    private var handleOpen = true
    private var entriesInSegment = 0
    /// The records of the closed segments, moved to their place in the file.
    private var spool: DirectorySpool?
    private var spooledEntries: Int64 = 0
    private var anyRecordZip64 = false

    init(output: ArchiveOutputFile, entriesPerSegment: Int) throws {
        precondition(entriesPerSegment > 0)
        self.output = output
        self.entriesPerSegment = entriesPerSegment
        handle = try output.openHandle()
    }

    deinit {
        if handleOpen { zip_discard(handle) }
    }

    /// Counts an entry added to ``handle``; when the segment is full, `close` closes it
    /// (`zip_close`, throwing libzip's error) and the next segment opens.
    func entryAdded(close: (OpaquePointer) throws -> Void) throws {
        entriesInSegment += 1
        guard entriesInSegment >= entriesPerSegment else { return }
        try closeSegment(close)
        handle = try output.openHandle()
        handleOpen = true
        entriesInSegment = 0
    }

    /// Closes the last segment and, when there were several, writes the one central
    /// directory and the end records, with `comment` as the archive's comment.
    func finish(comment: String?, close: (OpaquePointer) throws -> Void) throws {
        guard spool != nil else {
            // One segment: libzip's archive as it wrote it.
            if let comment, zip_set_archive_comment(handle, comment, UInt16(comment.utf8.count)) != 0 {
                throw StoreBackupError.archiveWrite(reason: "set the archive comment: \(String(cString: zip_strerror(handle)))")
            }
            try close(handle)
            handleOpen = false
            try output.finish()
            return
        }
        try closeSegment(close)
        guard let spool else { return }
        let directoryOffset = output.end
        try spool.copy { try output.append($0) }
        let directory = ZipEndRecords.Directory(entries: spooledEntries, size: spool.length, offset: directoryOffset)
        try output.append(ZipEndRecords.make(directory, anyRecordZip64: anyRecordZip64, comment: Array((comment ?? "").utf8)))
        try output.finish()
    }

    /// Closes the current segment, moves its central directory into the spool and lets the
    /// next segment start where that directory started.
    private func closeSegment(_ close: (OpaquePointer) throws -> Void) throws {
        try close(handle)
        handleOpen = false
        let start = output.segmentStart
        let length = output.end - start
        let directory = try ZipEndRecords.readUncommented(length: length) { offset, count in
            try output.readBack(at: start + offset, count: count)
        }
        if spool == nil { spool = try DirectorySpool(beside: output.path) }
        guard let spool else { return }
        var position = start + directory.offset
        let directoryEnd = position + directory.size
        var pending: [UInt8] = []
        var moved: [UInt8] = []
        var records: Int64 = 0
        while position < directoryEnd || !pending.isEmpty {
            if position < directoryEnd {
                let count = Int(min(Int64(DirectorySpool.chunkBytes), directoryEnd - position))
                pending += try output.readBack(at: position, count: count)
                position += Int64(count)
            }
            var used = 0
            try pending.withUnsafeBytes { bytes in
                while let length = CentralRecordRebase.recordLength(UnsafeRawBufferPointer(rebasing: bytes[used...])),
                    used + length <= bytes.count
                {
                    let record = UnsafeRawBufferPointer(rebasing: bytes[used..<used + length])
                    if try CentralRecordRebase.append(record, movedBy: start, to: &moved) { anyRecordZip64 = true }
                    used += length
                    records += 1
                }
            }
            pending.removeFirst(used)
            if moved.count >= DirectorySpool.chunkBytes {
                try spool.write(moved)
                moved.removeAll(keepingCapacity: true)
            }
            if position >= directoryEnd && used == 0 && !pending.isEmpty {
                throw StoreBackupError.archiveWrite(reason: "libzip's central directory ends inside a record")
            }
        }
        try spool.write(moved)
        guard records == directory.entries else {
            throw StoreBackupError.archiveWrite(
                reason: "libzip's central directory holds \(records) records, its end record says \(directory.entries)")
        }
        spooledEntries += records
        try output.startSegment(at: start + directory.offset)
    }
}

/// The central directory records of closed segments, kept in an unnamed file beside the
/// archive (nothing is left behind if the process dies) until they are copied after the
/// last segment.
final class DirectorySpool {
    static let chunkBytes = 1 << 20
    /// Linux's O_TMPFILE (`__O_TMPFILE | O_DIRECTORY`), a macro Swift does not import.
    private static let unnamedFile: Int32 = 0o20_000_000 | O_DIRECTORY
    private let descriptor: Int32
    private(set) var length: Int64 = 0

    init(beside archivePath: String) throws {
        let folder = (archivePath as NSString).deletingLastPathComponent
        let directory = folder.isEmpty ? "." : folder
        var fd = open(directory, Self.unnamedFile | O_RDWR | O_CLOEXEC, 0o600)
        if fd < 0 {
            // A file system without unnamed files: a named temporary, unlinked at once.
            let path = ScratchFiles.path(in: directory, purpose: "directory")
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 { unlink(path) }
        }
        guard fd >= 0 else { throw StoreBackupError.io(path: directory, operation: "create a temporary in", errno: errno) }
        descriptor = fd
    }

    deinit { close(descriptor) }

    func write(_ bytes: [UInt8]) throws {
        var done = 0
        while done < bytes.count {
            let wrote = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress! + done, bytes.count - done, off_t(length)) }
            if wrote < 0 && errno == EINTR { continue }
            guard wrote > 0 else {
                throw StoreBackupError.io(path: "(central directory spool)", operation: "write", errno: wrote < 0 ? errno : EIO)
            }
            done += wrote
            length += Int64(wrote)
        }
    }

    /// Hands the spooled bytes to `body` in order, a chunk at a time.
    func copy(_ body: ([UInt8]) throws -> Void) throws {
        var offset: Int64 = 0
        var chunk = [UInt8](repeating: 0, count: Self.chunkBytes)
        while offset < length {
            let count = Int(min(Int64(Self.chunkBytes), length - offset))
            try chunk.withUnsafeMutableBytes {
                try PositionedRead.exactly(
                    descriptor, into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<count]), at: offset,
                    path: "(central directory spool)")
            }
            try body(Array(chunk[0..<count]))
            offset += Int64(count)
        }
    }
}
