import Foundation

/// An entry's local header in a backup file on this machine, read by the readers that find
/// an entry's data without libzip (small files, blocks, the manifest).
///
/// libzip's `ZIP_CHECKCONS` compares every local header with the central directory when it
/// opens an archive; an archive listed without libzip has each header checked here instead,
/// as its entry is read: the signature, the compression method, and the name's length (the
/// data starts after the name and the header's own extra fields). The data itself is checked
/// against the central directory's CRC-32 and size, and the manifest's SHA-256.
enum LocalHeader {
    static let fixedBytes = 30

    /// Where `entry`'s data starts, counted from its local header, given at least the
    /// header's 30 fixed bytes. `centralNameLength` is the central directory's (nil when
    /// libzip checked the headers already).
    static func dataStart(
        _ header: UnsafeRawBufferPointer, entry: ArchiveEntry, centralNameLength: Int?, backupName: String
    ) throws -> Int {
        func le16(_ at: Int) -> Int { Int(header[at]) | Int(header[at + 1]) << 8 }
        func damaged(_ reason: String) -> StoreBackupError {
            .corruptArchive(name: backupName, reason: "\(entry.path) \(reason)")
        }
        guard header.count >= fixedBytes, le16(0) | le16(2) << 16 == 0x0403_4b50 else { throw damaged("has no local header") }
        // An encrypted entry's central method is libzip's (AES's own method, 99, is in the header).
        guard entry.isEncrypted || le16(8) == Int(entry.compressionMethod) else {
            throw damaged("has another compression method in its local header")
        }
        let nameLength = le16(26)
        if let centralNameLength, nameLength != centralNameLength {
            throw damaged("has another name in its local header than in the central directory")
        }
        return fixedBytes + nameLength + le16(28)
    }

    /// Reads `entry`'s local header from `file` and returns where its data starts in the file.
    static func dataOffset(
        of entry: ArchiveEntry, in file: LocalArchiveFile, centralNameLength: Int?, backupName: String
    ) throws -> Int64 {
        var header = [UInt8](repeating: 0, count: fixedBytes)
        let got = try header.withUnsafeMutableBytes { try file.readFully(at: entry.archiveOffset, into: $0) }
        let start = try header.withUnsafeBytes {
            try dataStart(
                UnsafeRawBufferPointer(rebasing: $0[0..<got]), entry: entry, centralNameLength: centralNameLength, backupName: backupName)
        }
        let offset = entry.archiveOffset + Int64(start)
        guard offset + entry.compressedSize <= file.size else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "\(entry.path) ends early")
        }
        return offset
    }
}
