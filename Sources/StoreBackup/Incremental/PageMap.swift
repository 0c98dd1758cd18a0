import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The binary page map of one database (docs/FORMAT.md, format 3): a 16-byte hash per
/// page, complete (kind 0) or changed pages only (kind 1). The chain state keeps the
/// complete map of the last backup; archives hold complete maps (fulls) or changed
/// entries (incrementals).
enum PageMapFormat {
    static let magic: [UInt8] = Array("SBPM".utf8)
    static let version: UInt8 = 1
    static let headerSize = 16
    static let hashSize = 16

    enum Kind: UInt8 {
        case complete = 0
        case changedOnly = 1
    }

    static func header(kind: Kind, hash: PageHashKind, pageSize: Int, pages: Int) -> [UInt8] {
        var bytes = magic + [version, kind.rawValue, hash.rawValue, 0]
        bytes += withUnsafeBytes(of: UInt32(pageSize).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt32(pages).littleEndian, Array.init)
        return bytes
    }
}

/// A complete page map on disk, read a range of pages at a time with pread: the map of a
/// large database is never held whole.
// Unchecked: immutable after init; reads are pread calls on one descriptor.
final class PageMapFile: @unchecked Sendable {
    let path: String
    let hashKind: PageHashKind
    let pageSize: Int
    let pages: Int
    private let descriptor: Int32

    /// Opens and checks a complete map; throws when it is missing, short or not one.
    init(path: String) throws {
        self.path = path
        let (descriptor, header, size) = try PositionedRead.openWithHeader(path, headerSize: PageMapFormat.headerSize)
        self.descriptor = descriptor
        guard header.count == PageMapFormat.headerSize,
            Array(header[0..<4]) == PageMapFormat.magic, header[4] == PageMapFormat.version,
            header[5] == PageMapFormat.Kind.complete.rawValue, let kind = PageHashKind(rawValue: header[6])
        else {
            close(descriptor)
            throw StoreBackupError.corruptArchive(name: path, reason: "not a complete page map")
        }
        hashKind = kind
        pageSize = Int(Self.uint32(header, at: 8))
        pages = Int(Self.uint32(header, at: 12))
        guard size == Int64(PageMapFormat.headerSize + pages * PageMapFormat.hashSize) else {
            close(descriptor)
            throw StoreBackupError.corruptArchive(name: path, reason: "page map size does not match its page count")
        }
    }

    deinit { close(descriptor) }

    /// The hashes of pages `first ..< first + count` (1-based; pages past the map's end are
    /// left out), 16 bytes each, into `buffer`; returns how many pages were read.
    func readHashes(from first: Int, count: Int, into buffer: inout [UInt8]) throws -> Int {
        let wanted = max(0, min(count, pages - first + 1)) * PageMapFormat.hashSize
        if buffer.count < wanted { buffer = [UInt8](repeating: 0, count: wanted) }
        return try buffer.withUnsafeMutableBytes { try readHashes(from: first, count: count, into: $0) }
    }

    /// As ``readHashes(from:count:into:)-([UInt8])``, into memory of at least `count` hashes.
    func readHashes(from first: Int, count: Int, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let available = max(0, min(count, pages - first + 1))
        guard available > 0 else { return 0 }
        let bytes = available * PageMapFormat.hashSize
        let offset = off_t(PageMapFormat.headerSize + (first - 1) * PageMapFormat.hashSize)
        try PositionedRead.exactly(
            descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<bytes]), at: Int64(offset), path: path)
        return available
    }

    static func uint32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
    }
}

/// Writes a page map file front to back through a small buffer (kind 0: hashes in page
/// order; kind 1: records of page number and hash).
final class PageMapWriter {
    let path: String
    let kind: PageMapFormat.Kind
    private let output: BufferedFileWriter
    private(set) var records = 0

    /// `durable: false` for a scratch file read back by this run only (no fsync).
    init(path: String, kind: PageMapFormat.Kind, hash: PageHashKind, pageSize: Int, pages: Int, durable: Bool = true) throws {
        self.path = path
        self.kind = kind
        output = try BufferedFileWriter(path: path, durable: durable)
        try output.write(PageMapFormat.header(kind: kind, hash: hash, pageSize: pageSize, pages: pages))
    }

    /// Adds page `page`'s hash (kind 0: every page, in order; kind 1: changed pages, ascending).
    func add(page: Int, hash: UnsafeRawBufferPointer) throws {
        if kind == .changedOnly { try withUnsafeBytes(of: UInt32(page).littleEndian) { try output.write($0) } }
        try output.write(hash)
        records += 1
    }

    /// Flushes (and fsyncs, when durable); the file's size is final.
    func finish() throws -> Int64 { try output.finish() }
}

/// A file written front to back with a 256 KiB buffer, then fsynced: page maps and page
/// deltas, which are written a page at a time. Made with O_EXCL and mode 0600. A point
/// writes four at once (maps, quick map, delta), so the buffer is kept small.
final class BufferedFileWriter {
    let path: String
    let descriptor: Int32
    /// False: a scratch file that only this run reads back (into the archive, which is
    /// made durable itself), so it is not fsynced.
    let durable: Bool
    private var buffer: [UInt8] = []
    private(set) var written: Int64 = 0
    private static let capacity = 256 << 10

    init(path: String, durable: Bool = true) throws {
        self.path = path
        self.durable = durable
        descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        buffer.reserveCapacity(Self.capacity)
    }

    deinit { close(descriptor) }

    func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        if buffer.count + bytes.count > Self.capacity { try flush() }
        if bytes.count >= Self.capacity {
            try writeAll(bytes)
        } else {
            buffer.append(contentsOf: bytes)
        }
        written += Int64(bytes.count)
    }

    /// Overwrites bytes already written (a header field known only at the end).
    func patch(_ bytes: [UInt8], at offset: Int64) throws {
        try flush()
        let wrote = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
        guard wrote == bytes.count else { throw StoreBackupError.io(path: path, operation: "write", errno: errno) }
    }

    func finish() throws -> Int64 {
        try flush()
        guard !durable || fsync(descriptor) == 0 else { throw StoreBackupError.io(path: path, operation: "fsync", errno: errno) }
        return written
    }

    private func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try writeAll($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let wrote = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if wrote < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "write", errno: errno)
            }
            offset += wrote
        }
    }
}
