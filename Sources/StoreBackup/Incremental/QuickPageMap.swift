import CISAL
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A database's quick page map, kept only in the chain state beside the store: a CRC-64 of
/// each page, which a point compares to find the pages that changed without hashing every
/// page with SHA-256 (the page map's hashes of unchanged pages are carried over instead).
/// CRC-64 is about twenty times cheaper than SHA-256 and catches every accidental change
/// but one in 2^64; it is no defence against pages crafted to collide, so the chain hashes
/// every page with SHA-256 again at least every `full-scan-every` (``ChainState/Database/pagesHashedAt``).
///
/// The file: `sbquick1`, the page count and the page size (little-endian UInt64 each),
/// then one little-endian UInt64 per page, in page order.
enum QuickPageMap {
    static let magic: [UInt8] = Array("sbquick1".utf8)
    static let headerSize = 24
    static let valueSize = 8

    /// The quick hash of one page.
    static func hash(_ page: UnsafeRawBufferPointer) -> UInt64 {
        crc64_ecma_refl(0, page.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(page.count))
    }

    static func header(pageSize: Int, pages: Int) -> [UInt8] {
        magic + withUnsafeBytes(of: UInt64(pages).littleEndian, Array.init)
            + withUnsafeBytes(of: UInt64(pageSize).littleEndian, Array.init)
    }
}

/// A quick page map on disk, read a range of pages at a time with pread.
final class QuickPageMapFile: @unchecked Sendable {
    let path: String
    let pageSize: Int
    let pages: Int
    private let descriptor: Int32

    /// Opens and checks a quick map; throws when it is missing, short or not one.
    init(path: String) throws {
        self.path = path
        let (descriptor, header, size) = try PositionedRead.openWithHeader(path, headerSize: QuickPageMap.headerSize)
        self.descriptor = descriptor
        let complete = header.count == QuickPageMap.headerSize
        let pages = complete ? header[8..<16].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) } : 0
        let pageSize = complete ? header[16..<24].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) } : 0
        guard complete, Array(header[0..<8]) == QuickPageMap.magic, pages < UInt64(Int32.max), pageSize <= 65536,
            UInt64(size) == UInt64(QuickPageMap.headerSize) + pages * UInt64(QuickPageMap.valueSize)
        else {
            close(descriptor)
            throw StoreBackupError.corruptArchive(name: path, reason: "not a quick page map")
        }
        self.pages = Int(pages)
        self.pageSize = Int(pageSize)
    }

    deinit { close(descriptor) }

    /// The values of pages `first ..< first + count` (1-based; pages past the map's end are
    /// left out) into `buffer` (8 bytes each); returns how many pages were read.
    func readValues(from first: Int, count: Int, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let available = max(0, min(count, pages - first + 1))
        guard available > 0 else { return 0 }
        let bytes = available * QuickPageMap.valueSize
        try PositionedRead.exactly(
            descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<bytes]),
            at: Int64(QuickPageMap.headerSize + (first - 1) * QuickPageMap.valueSize), path: path)
        return available
    }
}

/// Writes a quick page map front to back.
final class QuickPageMapWriter {
    private let output: BufferedFileWriter

    init(path: String, pageSize: Int, pages: Int) throws {
        output = try BufferedFileWriter(path: path)
        try output.write(QuickPageMap.header(pageSize: pageSize, pages: pages))
    }

    /// Adds the values of the next pages, in page order (8 bytes each, little-endian).
    func add(_ values: UnsafeRawBufferPointer) throws { try output.write(values) }

    /// Flushes and fsyncs.
    func finish() throws { _ = try output.finish() }
}
