import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// An archive's bytes by offset, wherever they are: a local file, or a remote backup read
/// in ranges (``RangedArchive``). ``CentralDirectoryCheck`` reads through it, so a remote
/// archive gets exactly the checks a local one does.
protocol ArchiveBytes {
    /// The archive's size in bytes.
    var size: Int64 { get }
    /// `count` bytes at `offset`, fewer only where the archive ends.
    func read(at offset: Int64, count: Int) throws -> [UInt8]
    /// Says that `range` (already checked against the archive's limits) is read next and
    /// read again by libzip: a remote archive fetches it at once and keeps it.
    func willRead(_ range: Range<Int64>) throws
}

/// A local archive file, read with `pread`.
struct FileArchiveBytes: ArchiveBytes {
    let descriptor: Int32
    let size: Int64

    func read(at offset: Int64, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let got = try bytes.withUnsafeMutableBytes { try PositionedRead.fill(descriptor, into: $0, at: offset, path: "(archive)") }
        return got == count ? bytes : Array(bytes[0..<got])
    }

    /// The page cache keeps what a file needs.
    func willRead(_ range: Range<Int64>) throws {}
}
