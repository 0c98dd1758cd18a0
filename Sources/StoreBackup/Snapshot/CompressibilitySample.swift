import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Whether a file's content looks already compressed (JPEG, video, zip...), judged from
/// 8 KiB in its middle: deflating such a file costs CPU and saves nothing, so `create`
/// stores it. The scan takes the sample while it has the file open for its SQLite header
/// (``StoreScanner``); files it did not sample are sampled before the archive is written.
enum CompressibilitySample {
    /// Bytes read from the middle of a file.
    static let size = 8192
    /// Smaller files are not sampled: they are deflated whatever they hold.
    static let minimumFileSize: Int64 = 4096

    /// Where the sample of a file of `fileSize` bytes starts, and how many bytes of the file
    /// it covers.
    static func range(fileSize: Int64) -> (offset: Int64, count: Int) {
        let offset = max(0, fileSize / 2 - 4096)
        return (offset, Int(min(Int64(size), max(0, fileSize - offset))))
    }

    /// Reads the sample of the file at `path` (`size` bytes) into `sample` through a plain
    /// descriptor, and judges it. For files that cannot be databases, like the pipeline's
    /// own reads: closing a descriptor drops the process's POSIX locks on that file, which
    /// only matters for a database this process has open.
    static func looksIncompressible(path: String, size: Int64, sample: UnsafeMutableRawBufferPointer) -> Bool {
        guard size >= minimumFileSize else { return false }
        let fd = EscapedName.withSystemPath(path) { open($0, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let range = range(fileSize: size)
        let wanted = UnsafeMutableRawBufferPointer(rebasing: sample[0..<min(sample.count, self.size)])
        let got = (try? PositionedRead.some(fd, into: wanted, at: Int64(range.offset), path: path)) ?? 0
        guard got > 0 else { return false }
        return looksIncompressible(UnsafeRawBufferPointer(rebasing: sample[0..<got]))
    }

    /// The verdict on `sample` (the bytes a file has in its ``range(fileSize:)``).
    static func looksIncompressible(_ sample: UnsafeRawBufferPointer) -> Bool {
        sample.count > 1024 && entropy(sample) > 7.8
    }

    /// Shannon entropy in bits per byte.
    static func entropy(_ bytes: UnsafeRawBufferPointer) -> Double {
        // Four tables, filled in turn: with one, an increment waits for the previous one
        // whenever neighbouring bytes are equal (most of a file that compresses well).
        var tables = [UInt32](repeating: 0, count: 4 * 256)
        tables.withUnsafeMutableBufferPointer { tables in
            var index = 0
            while index + 4 <= bytes.count {
                tables[Int(bytes[index])] &+= 1
                tables[256 + Int(bytes[index + 1])] &+= 1
                tables[512 + Int(bytes[index + 2])] &+= 1
                tables[768 + Int(bytes[index + 3])] &+= 1
                index += 4
            }
            while index < bytes.count {
                tables[Int(bytes[index])] &+= 1
                index += 1
            }
        }
        let total = Double(bytes.count)
        var sum = 0.0
        for value in 0..<256 {
            let count = tables[value] + tables[256 + value] + tables[512 + value] + tables[768 + value]
            guard count > 0 else { continue }
            let p = Double(count) / total
            sum -= p * log2(p)
        }
        return sum
    }
}
