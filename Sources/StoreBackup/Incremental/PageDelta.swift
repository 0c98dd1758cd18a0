import Foundation

/// Writes a page delta (docs/FORMAT.md, format 3): the pages of a database that changed
/// since the base, each as its page number and bytes, in ascending page order. Built as a
/// scratch file, then archived like any file (compressed, encrypted, checksummed).
final class PageDeltaWriter {
    static let magic: [UInt8] = Array("SBPD".utf8)
    static let version: UInt8 = 1
    /// Where the record count sits in the header: known only at the end.
    private static let recordCountOffset: Int64 = 16

    let path: String
    let pageSize: Int
    private let output: BufferedFileWriter
    private(set) var records = 0

    /// `durable: false`: the delta is a scratch file read back only into this run's archive.
    init(path: String, pageSize: Int, pages: Int, durable: Bool = true) throws {
        self.path = path
        self.pageSize = pageSize
        output = try BufferedFileWriter(path: path, durable: durable)
        var header = Self.magic + [Self.version, 0, 0, 0]
        header += withUnsafeBytes(of: UInt32(pageSize).littleEndian, Array.init)
        header += withUnsafeBytes(of: UInt32(pages).littleEndian, Array.init)
        header += [0, 0, 0, 0]
        try output.write(header)
    }

    /// Adds one changed page; pages must come in ascending order.
    func add(page: Int, bytes: UnsafeRawBufferPointer) throws {
        precondition(bytes.count == pageSize)
        try withUnsafeBytes(of: UInt32(page).littleEndian) { try output.write($0) }
        try output.write(bytes)
        records += 1
    }

    /// Writes the record count and fsyncs (when durable); returns the file's size.
    func finish() throws -> Int64 {
        try output.patch(withUnsafeBytes(of: UInt32(records).littleEndian, Array.init), at: Self.recordCountOffset)
        return try output.finish()
    }
}
