import CZip

extension ArchiveReader {
    /// Reads each of the archive's own entries (``ownEntries``) to its end and checks its
    /// CRC-32 and size (decrypting an encrypted one): verify's promise is every CRC of the
    /// archive, not only those of the entries a restore writes. A backup file on this machine
    /// is read as the other entries are, without a libzip handle (whose copy of the central
    /// directory is the largest memory per entry of a verify).
    func checkOwnEntries(cancel: CancellationFlag) throws {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        for entry in ownEntries {
            try cancel.throwIfCancelled()
            if InflatingEntryStream.canRead(entry) {
                // Checks the CRC-32 and the size itself once the deflate stream ends.
                let stream = try InflatingEntryStream(reader: self, entry: entry)
                while try buffer.withUnsafeMutableBytes({ try stream.read($0) }) > 0 {}
            } else if let file = localFile, !entry.isEncrypted, entry.compressionMethod == Int32(ZIP_CM_STORE),
                entry.size == entry.compressedSize, (0...Int64(buffer.count)).contains(entry.size)
            {
                try checkStored(entry, in: file, buffer: &buffer)
            } else {
                try withEntryStream(entry) { read in
                    while try buffer.withUnsafeMutableBytes({ try read($0) }) > 0 {}
                }
            }
        }
    }

    /// A small stored entry (the format marker) read with `pread`, its header checked.
    private func checkStored(_ entry: ArchiveEntry, in file: LocalArchiveFile, buffer: inout [UInt8]) throws {
        let offset = try LocalHeader.dataOffset(
            of: entry, in: file, centralNameLength: centralNameLength(of: entry), backupName: backupName)
        let count = Int(entry.size)
        let crc = try buffer.withUnsafeMutableBytes { bytes -> UInt32 in
            let part = UnsafeMutableRawBufferPointer(rebasing: bytes[0..<count])
            guard try file.readFully(at: offset, into: part) == count else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "\(entry.path) ends early")
            }
            return CRC32.update(0, part.baseAddress ?? bytes.baseAddress!, count: count)
        }
        guard crc == entry.crc else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "\(entry.path): CRC error")
        }
    }
}
