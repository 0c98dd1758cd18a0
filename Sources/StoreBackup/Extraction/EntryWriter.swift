import CPosix
import CZip
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes one file of an archive into the tree through its directory descriptor
/// (``ConfinedTree``), checked as it is read: cut off the moment it exceeds its declared size,
/// then checked against its CRC-32 and its manifest's size and SHA-256 (a database unpacked
/// in blocks: read back right after, beside its check, see ``DeferredDigest``). A file read
/// in blocks (``ParallelInflater``) is inflated on all cores; a small one of a backup file on
/// this machine is read whole (``LocalEntryReader``); any other goes through libzip.
struct EntryWriter {
    let plan: ExtractionPlan
    let root: ConfinedTree
    let cancel: CancellationFlag
    /// Which files reach the disk; every file is read and checked either way.
    let kept: KeptFiles
    /// Called once each file is written and checked: extract's test pause point, where a
    /// test cancels it part-way. nil for the others.
    var fileWritten: (@Sendable () -> Void)? = nil
    /// Threads that inflate one file read in blocks.
    var workers: Int = WorkerPool.cores

    /// Which of the files read are written to disk.
    enum KeptFiles: Equatable {
        /// Every file: restore, extract, a chain's steps.
        case all
        /// The databases the manifest names, which must exist on disk for `PRAGMA
        /// integrity_check` (verify); the other files are only hashed as they are read.
        case databases
        /// The files that start with SQLite's header: verify without a manifest finds
        /// databases by their first bytes, so it decides whether to write a file only once
        /// it has read them.
        case databasesByHeader
    }

    private var reader: ArchiveReader { plan.reader }

    /// Whether `entry` is written from its first byte (see ``KeptFiles``).
    private func keepsFromTheStart(_ entry: ArchiveEntry) -> Bool {
        switch kept {
        case .all: return true
        case .databases: return plan.isDatabase(entry)
        case .databasesByHeader: return false
        }
    }

    /// Writes one entry, checking it against its CRC and the manifest. With `unpacking` (only
    /// for an entry read in blocks), `start` runs once the file exists, the readers of
    /// `unpacking` follow the blocks as they are written, and the SHA-256 is left to the
    /// returned ``DeferredDigest``. With `patch`, the readers and the final checks see the
    /// file as the patch leaves it.
    @discardableResult
    func writeFile(
        _ entry: ArchiveEntry, archive: SharedArchiveHandle, buffers: EntryReadBuffers, expected: Manifest.File?,
        patch: (any DatabasePatch)? = nil,
        unpacking: (file: UnpackingDatabase, start: () -> Void)? = nil,
        onBytes: @Sendable (Int64, String) -> Void
    ) throws -> DeferredDigest? {
        let path = EscapedName.escapedRoot(root.root) + "/" + entry.path
        let decideByHeader = kept == .databasesByHeader
        var fd: Int32 = try (keepsFromTheStart(entry) ? root.createFile(entry.path, readBack: unpacking != nil || patch != nil) : -1)
        defer { if fd >= 0 { close(fd) } }
        if let expected, let blockPlan = Self.blockPlan(entry: entry, expected: expected) {
            var finished = false
            // Whatever goes wrong, a reader waiting for more bytes is let go.
            defer { if !finished { unpacking?.file.fail() } }
            unpacking?.start()
            // A patched database is hashed once, as it ends up: by the patch from the blocks it
            // patches when nothing reads the file meanwhile, else read back beside the check.
            patch?.hashesContent = unpacking == nil
            let inflater = ParallelInflater(
                archive: archive.handle, archiveLock: archive.lock, localFile: reader.localFile,
                centralNameLength: reader.centralNameLength(of: entry), entry: entry, blockSize: blockPlan.blockSize,
                compressedBlocks: blockPlan.blocks, workers: workers, cancel: cancel,
                password: reader.password, backupName: reader.backupName,
                pageCache: reader.pageCache, hashesContent: unpacking == nil && patch == nil,
                patchBlock: patch.map { patch in { try patch.patch(block: $1, at: $0, descriptor: fd, path: path) } })
            var written: Int64 = 0
            // The blocks come back in order, each already written at its offset.
            let result = try inflater.run(descriptor: fd, path: path) { bytes in
                written += bytes
                let final = try patch?.advance(descriptor: fd, path: path, written: written) ?? written
                unpacking?.file.advance(to: final)
                onBytes(bytes, entry.path)
            }
            // WinZip AE-2 entries under 20 bytes carry no CRC (libzip writes 0); the HMAC and SHA-256 still hold.
            let crcMatches = result.crc == entry.crc || (entry.isEncrypted && entry.size < 20)
            // Not hashed on the way in: there must be a digest to check when reading back.
            let sha256Matches = result.sha256.map { $0 == expected.sha256 } ?? (expected.sha256 != nil)
            guard crcMatches, result.size == expected.size, sha256Matches else {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
            try patch?.finish(descriptor: fd, path: path)
            try finishFile(fd: fd, entry: entry, path: path, patch: patch)
            unpacking?.file.finish()
            finished = true
            reader.pageCache?.drop(entry)
            // A patched database is checked as the patch left it, against the chain's newest manifest.
            if patch?.hashesContent == true { return nil }
            guard let expectedSHA256 = patch?.finalSHA256 ?? (result.sha256 == nil ? expected.sha256 : nil) else { return nil }
            let digest = DeferredDigest(
                owning: fd, path: path, entryPath: entry.path, size: patch?.finalSize ?? expected.size, expectedSHA256: expectedSHA256)
            fd = -1
            return digest
        }
        precondition(unpacking == nil, "only an entry read in blocks is checked while it is written")
        var hasher = SHA256()
        var written: Int64 = 0
        func consume(_ chunk: UnsafeRawBufferPointer) throws {
            // Stop before writing a byte past the declared size (libzip checks the CRC only at the end).
            guard chunk.count <= entry.size - written else {
                throw StoreBackupError.corruptArchive(
                    name: reader.backupName, reason: "\(entry.path) holds more than its declared \(entry.size) bytes")
            }
            if decideByHeader && written == 0 && chunk.count >= 16 && chunk.prefix(16).elementsEqual(SQLiteHeader.magic) {
                fd = try root.createFile(entry.path)
            }
            hasher.update(bufferPointer: chunk)
            if fd >= 0 { try Self.writeAll(fd, chunk, path: path) }
            written += Int64(chunk.count)
            onBytes(Int64(chunk.count), entry.path)
            try cancel.throwIfCancelled()
        }
        if let local = reader.localFile, LocalEntryReader.canRead(entry, into: buffers),
            let bytes = try LocalEntryReader(file: local, backupName: reader.backupName)
                .read(entry, centralNameLength: reader.centralNameLength(of: entry), into: buffers)
        {
            try consume(bytes)
        } else {
            // Any other entry, and a damaged one, which libzip reads and names the damage of.
            try readThroughLibzip(entry, archive: archive, buffer: buffers.plain, consume: consume)
        }
        guard written == entry.size else {
            throw StoreBackupError.corruptArchive(
                name: reader.backupName, reason: "\(entry.path) holds \(written) bytes, not its declared \(entry.size)")
        }
        if let expected {
            let digest = FileDigest.hex(hasher.finalize())
            guard expected.size == written, expected.hasSHA256(digest) else {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
        }
        if let patch {
            _ = try patch.advance(descriptor: fd, path: path, written: written)
            try patch.finish(descriptor: fd, path: path)
        }
        try finishFile(fd: fd, entry: entry, path: path, patch: patch)
        reader.pageCache?.drop(entry)
        return nil
    }

    /// Reads `entry` through the shared libzip handle, a buffer at a time, into `consume`.
    private func readThroughLibzip(
        _ entry: ArchiveEntry, archive: SharedArchiveHandle, buffer: UnsafeMutableRawBufferPointer,
        consume: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var failure = ""
        let opened = try archive.withLock { handle in
            let file = zip_fopen_index(handle, entry.index, 0)
            if file == nil { failure = String(cString: zip_strerror(handle)) }
            return file
        }
        guard let file = opened else {
            throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path): \(failure)")
        }
        defer { _ = try? archive.withLock { _ in zip_fclose(file) } }
        while true {
            let (got, failure) = try archive.withLock { _ in
                let got = zip_fread(file, buffer.baseAddress, zip_uint64_t(buffer.count))
                return (got, got < 0 ? String(cString: zip_file_strerror(file)) : "")
            }
            if got < 0 {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path): \(failure)")
            }
            if got == 0 { return }
            try consume(UnsafeRawBufferPointer(rebasing: buffer[0..<Int(got)]))
        }
    }

    /// How to read an entry through `ParallelInflater`: the manifest's block index, or for an
    /// encrypted deflated entry of one block, that one block. The latter decrypts with AES-NI
    /// instead of libzip's much slower AES, which matters for stores of many small files.
    static func blockPlan(entry: ArchiveEntry, expected: Manifest.File) -> (blockSize: Int, blocks: [Int])? {
        if let blockSize = expected.deflateBlockSize, let blocks = expected.deflateBlocks,
            ParallelInflater.canUse(entry: entry, blockSize: blockSize, blocks: blocks)
        {
            return (blockSize, blocks)
        }
        let single = [Int(entry.compressedSize) - WinZipAES.overhead]
        if entry.isEncrypted, expected.deflateBlocks == nil, entry.size <= Int64(CompressionPipeline.blockSize),
            ParallelInflater.canUse(entry: entry, blockSize: CompressionPipeline.blockSize, blocks: single)
        {
            return (CompressionPipeline.blockSize, single)
        }
        return nil
    }

    /// Mode and time, set through the open descriptor; a file of ``startsWritebackFrom``
    /// bytes or more has its last dirty pages start for the disk now, so the sync that
    /// follows the unpacking has only the last few files left to wait for. Smaller files are
    /// left to that sync: started one by one, each cost the disk a request of its own (a
    /// notification of the virtual disk per file), where the sync writes them in batches.
    /// A patched file takes the patch's mode and time: set once, after its last write.
    private func finishFile(fd: Int32, entry: ArchiveEntry, path: String, patch: (any DatabasePatch)? = nil) throws {
        guard fd >= 0 else { return }
        if entry.size >= Self.startsWritebackFrom { _ = sb_start_writeback(fd, 0, 0) }
        let permissions = patch.map { $0.finalPermissions & 0o7777 } ?? UInt32(entry.permissions)
        let modificationTime = patch?.finalModificationTime ?? Int64(entry.modificationTime)
        guard fchmod(fd, mode_t(permissions)) == 0 else { throw StoreBackupError.io(path: path, operation: "chmod", errno: errno) }
        var times = [
            timespec(tv_sec: time_t(modificationTime), tv_nsec: 0),
            timespec(tv_sec: time_t(modificationTime), tv_nsec: 0),
        ]
        guard futimens(fd, &times) == 0 else { throw StoreBackupError.io(path: path, operation: "set time", errno: errno) }
        fileWritten?()
    }

    /// The size from which a file's writeback is started as soon as it is written.
    static let startsWritebackFrom: Int64 = 1 << 20

    private static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let wrote = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if wrote < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "write", errno: errno)
            }
            offset += wrote
        }
    }
}
