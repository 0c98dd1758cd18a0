import Foundation

/// Fixed ceilings on every number a backup archive supplies.
///
/// An archive may come from storage someone else controls, so nothing read from it sizes
/// an allocation until it has been checked against one of these, and memory stays bounded
/// whatever the archive says. Memory grows with the entries and their name length
/// (libzip's directory in each of the few handles, the entry list, the decoded manifest);
/// docs/trust-model.md gives the budget. The entry limit is set for real stores (folders
/// of external blobs hold tens of thousands of files) rather than for the budget; `create` refuses a
/// store with more entries than restore accepts, so no backup is made that could not be
/// restored.
enum ArchiveLimits {
    /// Entries in the central directory (files, folders, links and the manifest).
    static let maxEntries = 50_000
    /// Bytes of the central directory; libzip holds all of it in memory.
    static let maxCentralDirectoryBytes: Int64 = 8 << 20  // 8 MiB
    /// Bytes of one entry name: Linux's PATH_MAX (4096 with its NUL), plus room for the
    /// prefix a store's own `.storebackup` entries get (``ArchiveNames/storePrefix``).
    static let maxNameBytes = 4096 + 32
    /// Bytes of the manifest, declared and read.
    static let maxManifestBytes: Int64 = 24 << 20  // 24 MiB
    /// Bytes of a link's target (Linux's PATH_MAX). There is no limit on the number of
    /// links: each is resolved once, following at most ``maxLinkHops`` others.
    static let maxLinkTargetBytes = 4096
    /// Links followed while resolving one link's target, as the kernel's ELOOP limit.
    static let maxLinkHops = 40
    /// Deflate block size for the parallel path: the block buffers are this big, so a
    /// larger size in a manifest sends the entry through the sequential reader instead.
    static let maxDeflateBlockSize = 2 << 20
    /// Largest compressed size of one deflate block of `blockSize` bytes: deflate never
    /// grows data by more than a few bytes per 16 KiB stored block.
    static func maxCompressedBlock(blockSize: Int) -> Int { blockSize + blockSize / 16 + 1024 }
    /// Threads extracting files side by side. Each holds its own libzip handle, and so its
    /// own copy of the central directory: the count is fixed, not the machine's core count,
    /// so the memory budget holds on any machine (large files still inflate on every core).
    static let maxExtractionHandles = 2
    /// Free space left on the target's file system after a restore: this share of it...
    static let reserveFraction = 0.05
    /// ...or this many bytes, whichever is larger.
    static let minimumReserveBytes: Int64 = 256 << 20
}
