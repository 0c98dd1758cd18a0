import Crypto
import Foundation

/// Serves the plain bytes of one database entry of a backup, block by block: reads only the
/// compressed bytes of the block that holds them, decrypts them at their counter offset
/// (WinZip AES is counter mode), inflates them, and checks them against the block's
/// SHA-256 before anyone sees them. Inflated blocks are kept in a small LRU cache.
///
/// Format 4 gives each block its SHA-256 in the manifest. Older formats do not: their
/// hashes are made by ``verifyWhole()``, one pass over the entry that checks its SHA-256
/// against the manifest, after which blocks are served and checked the same way.
// Unchecked: every mutable property is used with `lock` held.
final class EntryBlockReader: @unchecked Sendable {
    let index: EntryBlockIndex
    let backupName: String
    let databasePath: String
    private let span: ArchiveSpanReader
    /// Where the entry's data starts in the archive (after the AES salt and verifier).
    private let dataOffset: Int64
    private let encryptionKey: [UInt8]?
    private let lock = NSLock()
    private var hashes: [RawSHA256]
    private let cache: InflatedBlockCache
    /// Names the entry's blocks in `cache` (shared with siblings, which read the same entry).
    private let entryKey: Int
    private var inflater: BlockInflater?
    private var ctr: WinZipCTR?
    private var blocksRead = 0
    private var compressedBytesRead: Int64 = 0

    /// `cache`: one shared with other readers; nil for one of its own of `cacheBytes`.
    /// `entryKey`: a sibling's (nil: a new one).
    init(
        index: EntryBlockIndex, hashes: [RawSHA256], span: ArchiveSpanReader, dataOffset: Int64, encryptionKey: [UInt8]?,
        cacheBytes: Int, cache: InflatedBlockCache? = nil, entryKey: Int? = nil, backupName: String, databasePath: String
    ) {
        self.index = index
        self.hashes = hashes
        self.span = span
        self.dataOffset = dataOffset
        self.encryptionKey = encryptionKey
        self.backupName = backupName
        self.databasePath = databasePath
        self.cache = cache ?? InflatedBlockCache(bytes: cacheBytes, blockSize: index.blockSize, minimum: 2)
        self.entryKey = entryKey ?? BlockKey.newEntry()
    }

    /// Another reader of the same entry, with an inflater of its own (one per thread) and a
    /// cache of its own (of `cacheBytes`, else as large as this one's), or `shared`.
    func sibling(cacheBytes: Int? = nil, shared: InflatedBlockCache? = nil) -> EntryBlockReader {
        lock.lock()
        defer { lock.unlock() }
        return EntryBlockReader(
            index: index, hashes: hashes, span: span, dataOffset: dataOffset, encryptionKey: encryptionKey,
            cacheBytes: cacheBytes ?? cache.capacity * index.blockSize, cache: shared, entryKey: entryKey, backupName: backupName,
            databasePath: databasePath)
    }

    /// Blocks read from the archive so far and their compressed bytes, and the bytes a
    /// remote archive fetched (nil for a local one).
    var statistics: (blocks: Int, compressedBytes: Int64, fetchedBytes: Int64?) {
        lock.lock()
        defer { lock.unlock() }
        return (blocksRead, compressedBytesRead, span.fetchedBytes)
    }

    /// The SHA-256 of block `number`'s plain bytes as the manifest gives it; nil before an
    /// older format's hashes are made (``verifyWhole(sha256:)``).
    func blockHash(_ number: Int) -> RawSHA256? {
        lock.lock()
        defer { lock.unlock() }
        return hashes.count == index.blocks.count && number < hashes.count ? hashes[number] : nil
    }

    /// Copies the plain bytes at `offset` into `buffer` (which must end within the entry).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        lock.lock()
        defer { lock.unlock() }
        var done = 0
        while done < buffer.count {
            let position = offset + Int64(done)
            let number = index.blockIndex(at: position)
            let block = try plainBlock(number)
            let start = Int(position - Int64(number) * Int64(index.blockSize))
            let count = min(buffer.count - done, block.count - start)
            guard count > 0 else { throw damaged(number, "it is shorter than the entry says") }
            block.withUnsafeBytes { (buffer.baseAddress! + done).copyMemory(from: $0.baseAddress! + start, byteCount: count) }
            done += count
        }
    }

    /// (Formats 1-3.) Reads every block once, in order, and checks the whole entry's SHA-256
    /// against `sha256` (the manifest's); the blocks' own hashes are taken from that pass.
    func verifyWhole(sha256: String?) throws {
        lock.lock()
        defer { lock.unlock() }
        var whole = SHA256()
        var made: [RawSHA256] = []
        made.reserveCapacity(index.blocks.count)
        for number in index.blocks.indices {
            let plain = try inflate(number)
            whole.update(data: plain)
            made.append(RawSHA256(bytes: SHA256.hash(data: plain))!)
        }
        guard let sha256, FileDigest.hex(whole.finalize()) == sha256 else {
            throw StoreBackupError.checksumMismatch(name: backupName, entry: databasePath)
        }
        hashes = made
    }

    private func plainBlock(_ number: Int) throws -> [UInt8] {
        if let cached = cache.block(BlockKey(entry: entryKey, number: number)) { return cached }
        let plain = try inflate(number)
        guard number < hashes.count, RawSHA256(bytes: SHA256.hash(data: plain)) == hashes[number] else {
            throw damaged(number, "its bytes do not match its SHA-256 in the manifest")
        }
        cache.keep(plain, as: BlockKey(entry: entryKey, number: number))
        return plain
    }

    /// The block's plain bytes, read, decrypted and inflated (not yet checked).
    private func inflate(_ number: Int) throws -> [UInt8] {
        guard number < index.blocks.count else { throw damaged(number, "the entry has no such block") }
        let block = index.blocks[number]
        // A local plain block is inflated from the page cache where it is, not copied out first.
        if encryptionKey == nil, index.deflated, case .local(let file) = span,
            let plain = try file.withMapping(at: dataOffset + block.offset, count: block.compressedSize, { try inflate(number, $0) })
        {
            blocksRead += 1
            compressedBytesRead += Int64(block.compressedSize)
            return plain
        }
        var raw = try span.read(at: dataOffset + block.offset, count: block.compressedSize, backupName: backupName)
        blocksRead += 1
        compressedBytesRead += Int64(block.compressedSize)
        if let encryptionKey {
            if ctr == nil { ctr = try WinZipCTR(key: encryptionKey) }
            raw.withUnsafeMutableBytes { ctr!.apply(to: $0.baseAddress!, count: $0.count, at: block.offset) }
        }
        guard index.deflated else { return raw }
        return try raw.withUnsafeBytes { try inflate(number, $0) }
    }

    /// Block `number`'s plain bytes from its compressed (and decrypted) `input`.
    private func inflate(_ number: Int, _ input: UnsafeRawBufferPointer) throws -> [UInt8] {
        let block = index.blocks[number]
        if inflater == nil { inflater = try BlockInflater() }
        var plain = cache.takeSpare(count: block.plainSize) ?? [UInt8](repeating: 0, count: block.plainSize)
        let isLast = number == index.blocks.count - 1
        let inflated = plain.withUnsafeMutableBytes { output in
            inflater!.inflate(input.baseAddress!, count: input.count, into: output.baseAddress!, capacity: output.count, isLast: isLast)
        }
        guard inflated == block.plainSize else { throw damaged(number, "it cannot be decompressed") }
        return plain
    }

    private func damaged(_ number: Int, _ reason: String) -> StoreBackupError {
        .damagedBlock(name: backupName, database: databasePath, block: number, reason: reason)
    }
}
