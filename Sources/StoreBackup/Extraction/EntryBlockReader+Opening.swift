import Foundation

extension EntryBlockReader {
    /// The reader of `entry`, a database stored whole in `reader`'s archive and read through
    /// `span`, with its block hashes ready: format 4's from the manifest; for an entry of one
    /// block, the entry's own SHA-256; else (formats 1-3) made by one checked pass over the
    /// entry unless `hashesRequired` (then nil: the caller reads it whole another way).
    /// `cache`: shared with other readers (else one of its own of `cacheBytes`);
    /// `describedAs`: what a damaged block's message names (else the entry's path).
    static func open(
        reader: ArchiveReader, span: ArchiveSpanReader, entry: ArchiveEntry, row: Manifest.File, cacheBytes: Int,
        cache: InflatedBlockCache? = nil, describedAs: String? = nil, hashesRequired: Bool = false
    ) throws -> EntryBlockReader? {
        let path = entry.path, name = reader.backupName
        guard let index = EntryBlockIndex.make(entry: entry, row: row) else {
            throw StoreBackupError.corruptArchive(
                name: name, reason: "\(path) cannot be read block by block (use storebackup extract to take it out)")
        }
        var hashes = row.deflateBlockHashes ?? []
        if hashes.isEmpty, index.blocks.count == 1, let whole = row.sha256.flatMap(RawSHA256.init(hex:)) { hashes = [whole] }
        if hashesRequired && hashes.count != index.blocks.count { return nil }
        try reader.checkLocalHeader(index: entry.index, exact: true)
        let header = try span.read(at: entry.archiveOffset, count: LocalHeader.fixedBytes, backupName: name)
        var dataOffset = try header.withUnsafeBytes {
            entry.archiveOffset
                + Int64(
                    try LocalHeader.dataStart(
                        $0, entry: entry, centralNameLength: reader.centralNameLength(of: entry), backupName: name))
        }
        var key: [UInt8]?
        if entry.isEncrypted {
            guard let password = reader.password else { throw StoreBackupError.passwordRequired(name: name) }
            let salt = try span.read(at: dataOffset, count: WinZipAES.headerLength, backupName: name)
            key = try WinZipPasswordCheck.keys(password: password, header: salt, backupName: name).encryption
            dataOffset += Int64(WinZipAES.headerLength)
        }
        let blocks = EntryBlockReader(
            index: index, hashes: hashes, span: span, dataOffset: dataOffset, encryptionKey: key, cacheBytes: cacheBytes,
            cache: cache, backupName: name, databasePath: describedAs ?? path)
        if hashes.count != index.blocks.count {
            guard row.deflateBlockHashes == nil else {
                throw StoreBackupError.corruptArchive(name: name, reason: "its manifest lists the wrong number of block hashes for \(path)")
            }
            try blocks.verifyWhole(sha256: row.sha256)
        }
        return blocks
    }
}
