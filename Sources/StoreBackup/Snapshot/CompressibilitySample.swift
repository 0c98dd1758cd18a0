import Foundation

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

    /// The verdict on `sample` (the bytes a file has in its ``range(fileSize:)``).
    static func looksIncompressible(_ sample: UnsafeRawBufferPointer) -> Bool {
        sample.count > 1024 && entropy(sample) > 7.8
    }

    /// Shannon entropy in bits per byte.
    static func entropy(_ bytes: UnsafeRawBufferPointer) -> Double {
        var counts = [Int](repeating: 0, count: 256)
        counts.withUnsafeMutableBufferPointer { counts in
            for byte in bytes { counts[Int(byte)] &+= 1 }
        }
        let total = Double(bytes.count)
        return counts.reduce(0.0) { sum, count in
            guard count > 0 else { return sum }
            let p = Double(count) / total
            return sum - p * log2(p)
        }
    }
}
