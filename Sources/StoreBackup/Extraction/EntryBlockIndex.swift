import CZip
import Foundation

/// Where each 1 MiB block of a database's entry lies in the archive, and what its bytes
/// must hash to, checked against the entry before anything is trusted (docs/FORMAT.md §6).
struct EntryBlockIndex: Sendable {
    struct Block: Sendable {
        /// Where the block's compressed (and encrypted) bytes start in the entry's data,
        /// after the AES salt and verifier.
        let offset: Int64
        let compressedSize: Int
        let plainSize: Int
    }

    let blocks: [Block]
    /// The block size of the plain bytes (every block but the last).
    let blockSize: Int
    /// Deflated (else stored: the block's bytes are the plain bytes).
    let deflated: Bool
    /// The entry's plain size.
    let size: Int64

    /// The blocks of `entry` as its manifest row lists them: block-deflated with a block
    /// list, one deflated block (an entry of at most one block), or stored (cut into blocks
    /// here). Nil when the entry cannot be read block by block (a large entry deflated as
    /// one stream by another writer).
    static func make(entry: ArchiveEntry, row: Manifest.File) -> EntryBlockIndex? {
        let blockSize = CompressionPipeline.blockSize
        let overhead = entry.isEncrypted ? Int64(WinZipAES.overhead) : 0
        let dataSize = entry.compressedSize - overhead
        guard entry.size == row.size, dataSize >= 0, !entry.isEncrypted || entry.encryptionMethod == UInt16(ZIP_EM_AES_256) else {
            return nil
        }
        func plainSize(_ index: Int) -> Int { Int(min(Int64(blockSize), entry.size - Int64(index) * Int64(blockSize))) }
        switch entry.compressionMethod {
        case Int32(ZIP_CM_STORE):
            guard dataSize == entry.size else { return nil }
            let count = Int((entry.size + Int64(blockSize) - 1) / Int64(blockSize))
            let blocks = (0..<count).map {
                Block(offset: Int64($0) * Int64(blockSize), compressedSize: plainSize($0), plainSize: plainSize($0))
            }
            return EntryBlockIndex(blocks: blocks, blockSize: blockSize, deflated: false, size: entry.size)
        case Int32(ZIP_CM_DEFLATE):
            if entry.size <= Int64(blockSize) && row.deflateBlocks == nil {
                guard dataSize <= Int64(ArchiveLimits.maxCompressedBlock(blockSize: blockSize)) else { return nil }
                let block = Block(offset: 0, compressedSize: Int(dataSize), plainSize: Int(entry.size))
                return EntryBlockIndex(blocks: entry.size == 0 ? [] : [block], blockSize: blockSize, deflated: true, size: entry.size)
            }
            guard row.deflateBlockSize == blockSize, let sizes = row.deflateBlocks,
                ParallelInflater.canUse(entry: entry, blockSize: row.deflateBlockSize, blocks: sizes)
            else { return nil }
            var offset: Int64 = 0
            var blocks: [Block] = []
            blocks.reserveCapacity(sizes.count)
            for (index, size) in sizes.enumerated() {
                blocks.append(Block(offset: offset, compressedSize: size, plainSize: plainSize(index)))
                offset += Int64(size)
            }
            return EntryBlockIndex(blocks: blocks, blockSize: blockSize, deflated: true, size: entry.size)
        default:
            return nil
        }
    }

    /// The block holding byte `offset` of the plain entry.
    func blockIndex(at offset: Int64) -> Int { Int(offset / Int64(blockSize)) }
}
