import CZip
import Foundation

/// Reads a small entry of a backup file on this machine whole, without libzip: its local
/// header and its data in one `pread` (two when the header's extra fields are long),
/// inflated with ISA-L into the calling thread's buffers.
///
/// With it (and ``ParallelInflater`` and ``InflatingEntryStream`` reading the same way) a
/// restore or verify of an unencrypted local backup needs no libzip handle, whose copy of
/// the central directory was its largest memory per entry. It also spares each small file
/// libzip's chain of sources and zlib stream, opened in turns on the one shared handle. The
/// caller checks the SHA-256 as for any other entry; ``LocalHeader`` checks the header.
struct LocalEntryReader: Sendable {
    let file: LocalArchiveFile
    let backupName: String

    /// Bytes read past the local header's 30 fixed ones, in the same read as the data, for
    /// its name and extra fields (storebackup's own: the name and two timestamps).
    static let headerSlack = 512

    /// Whether `entry` is read this way: unencrypted, stored or deflated, and small enough
    /// for `buffers`. Any other goes through libzip.
    static func canRead(_ entry: ArchiveEntry, into buffers: EntryReadBuffers) -> Bool {
        let method = entry.compressionMethod
        return !entry.isEncrypted && (method == Int32(ZIP_CM_STORE) || method == Int32(ZIP_CM_DEFLATE))
            && entry.size >= 0 && entry.size <= Int64(buffers.capacity)
            && entry.compressedSize >= 0 && entry.compressedSize <= Int64(EntryReadBuffers.compressedCapacity(buffers.capacity))
    }

    /// The entry's bytes, checked against its declared size and CRC-32, valid until `buffers`
    /// are used again; nil when they do not inflate to that size or fail the CRC-32 (the
    /// caller reads such an entry again through libzip, which names the damage). Throws
    /// `corruptArchive` when the header or the stored size does not hold. `centralNameLength`
    /// is for ``LocalHeader``'s check (nil when libzip checked every header on opening).
    func read(_ entry: ArchiveEntry, centralNameLength: Int?, into buffers: EntryReadBuffers) throws -> UnsafeRawBufferPointer? {
        let compressedSize = Int(entry.compressedSize)
        let raw = buffers.compressed
        let wanted = Int(min(Int64(30 + Self.headerSlack + compressedSize), file.size - entry.archiveOffset))
        let got = try file.readFully(at: entry.archiveOffset, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<max(0, wanted)]))
        let dataStart = try LocalHeader.dataStart(
            UnsafeRawBufferPointer(rebasing: raw[0..<got]), entry: entry, centralNameLength: centralNameLength,
            backupName: backupName)
        let data: UnsafeRawBufferPointer
        if dataStart + compressedSize <= got {
            data = UnsafeRawBufferPointer(rebasing: raw[dataStart..<dataStart + compressedSize])
        } else {
            // Long extra fields: the data again, from its first byte.
            let again = UnsafeMutableRawBufferPointer(rebasing: raw[0..<compressedSize])
            guard try file.readFully(at: entry.archiveOffset + Int64(dataStart), into: again) == compressedSize else {
                throw damaged(entry, "ends early")
            }
            data = UnsafeRawBufferPointer(again)
        }
        let bytes: UnsafeRawBufferPointer
        if entry.compressionMethod == Int32(ZIP_CM_STORE) {
            guard compressedSize == entry.size else { throw damaged(entry, "is stored in \(compressedSize) bytes, not its \(entry.size)") }
            bytes = data
        } else {
            guard
                let inflated = try buffers.inflater.inflate(
                    data.baseAddress!, count: data.count, into: buffers.plain.baseAddress!, capacity: buffers.capacity, isLast: true),
                inflated == entry.size
            else { return nil }
            bytes = UnsafeRawBufferPointer(rebasing: buffers.plain[0..<inflated])
        }
        return CRC32.update(0, bytes.baseAddress!, count: bytes.count) == entry.crc ? bytes : nil
    }

    private func damaged(_ entry: ArchiveEntry, _ reason: String) -> StoreBackupError {
        StoreBackupError.corruptArchive(name: backupName, reason: "\(entry.path) \(reason)")
    }
}
