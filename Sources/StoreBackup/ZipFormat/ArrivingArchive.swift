import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A local archive file still being downloaded (restore unpacks a remote backup while its
/// bytes arrive): libzip and ``CentralDirectoryCheck`` read it with `pread`, each read
/// waiting until its bytes are in the file (``ArrivingFile``), so they see exactly what a
/// finished download holds. A read of bytes that never come (the download failed) throws
/// the download's failure.
final class ArrivingArchive: ArchiveBytes, PositionedBytes, Sendable {
    let path: String
    let arrival: ArrivingFile
    private let descriptor: Int32

    var size: Int64 { arrival.size }

    /// Opens `path` (created by the download) for reading.
    init(path: String, arrival: ArrivingFile) throws {
        self.path = path
        self.arrival = arrival
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
    }

    deinit { close(descriptor) }

    /// Why the download failed, when it did (libzip only knows that a read failed).
    var lastFailure: StoreBackupError? {
        guard let failure = arrival.failed else { return nil }
        return failure as? StoreBackupError ?? StoreBackupError.wrapping(failure)
    }

    // MARK: ArchiveBytes

    func read(at offset: Int64, count: Int) throws -> [UInt8] {
        let wanted = Int(max(0, min(Int64(count), size - offset)))
        var bytes = [UInt8](repeating: 0, count: wanted)
        var done = 0
        while done < wanted {
            let got = try bytes.withUnsafeMutableBytes { buffer in
                try read(at: offset + Int64(done), into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
            }
            guard got > 0 else { break }
            done += got
        }
        return done == wanted ? bytes : Array(bytes[0..<done])
    }

    func willRead(_ range: Range<Int64>) throws { try arrival.waitUntilArrived(range) }

    // MARK: PositionedBytes

    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset < size, buffer.count > 0 else { return 0 }
        let count = Int(min(Int64(buffer.count), size - offset))
        try arrival.waitUntilArrived(offset..<offset + Int64(count))
        let got = try PositionedRead.some(
            descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]), at: offset, path: path)
        guard got > 0 else { throw StoreBackupError.io(path: path, operation: "read", errno: EIO) }
        return got
    }

    /// A libzip handle over the file as it arrives (see ``ZipSource``); libzip's check of
    /// every local header waits for the whole file (``ArchiveReader/checkConsistency(path:backupName:)``).
    func openHandle(backupName: String) throws -> OpaquePointer {
        try ZipSource.openHandle(over: self, backupName: backupName) { self.lastFailure }
    }
}
