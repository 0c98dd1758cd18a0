import Foundation

/// Reads exact byte ranges of a backup archive for the backup VFS: `pread` on a local file,
/// one ranged request for a remote one (never a chunk around it).
enum ArchiveSpanReader: Sendable {
    case local(LocalArchiveFile)
    case ranged(RangedArchive)

    /// `count` bytes at `offset`; throws when the archive ends first.
    func read(at offset: Int64, count: Int, backupName: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let got: Int
        switch self {
        case .local(let file):
            got = try bytes.withUnsafeMutableBytes { try file.readFully(at: offset, into: $0) }
        case .ranged(let archive):
            bytes = try archive.peek(at: offset, count: count)
            got = bytes.count
        }
        guard got == count else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "it ends inside an entry's data")
        }
        return bytes
    }

    /// Bytes fetched from a remote archive so far (nil for a local file, read with `pread`).
    var fetchedBytes: Int64? {
        guard case .ranged(let archive) = self else { return nil }
        return archive.fetched.bytes
    }
}
