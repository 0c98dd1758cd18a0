import Foundation

/// Ceilings on every number a backup archive supplies.
///
/// An archive may come from storage someone else controls, so nothing read from it sizes
/// an allocation until it has been checked. The checks follow the archive's own
/// consistency rather than fixed small numbers: the entry count must fit the central
/// directory's bytes, the central directory must fit inside the file, and the manifest's
/// size must fit a bound per entry. What an archive can make us allocate thus grows only
/// with the bytes it really holds. One fixed ceiling remains, ``maxEntries``, far above
/// real stores, so that memory per entry (see docs/dev/scale.md) stays within what a machine
/// has; `create` refuses a store beyond it up front, so no backup is made that restore
/// would refuse.
enum ArchiveLimits {
    /// Entries in the central directory (files, folders, links and the manifest).
    static let maxEntries = 10_000_000
    /// Smallest central directory header: 46 fixed bytes and a name of at least one byte.
    static let minCentralHeaderBytes: Int64 = 47
    /// Largest central directory allowed for `entries` entries: a header, a name of
    /// ``maxNameBytes`` and 1 KiB of extra fields and comment each (storebackup writes
    /// well under 100), and never less than the 8 MiB that older versions accepted.
    static func maxCentralDirectoryBytes(entries: Int64) -> Int64 {
        max(8 << 20, entries * (46 + Int64(maxNameBytes) + 1024))
    }
    /// Bytes of one entry name: Linux's PATH_MAX (4096 with its NUL), plus room for the
    /// prefix a store's own `.storebackup` entries get (``ArchiveNames/storePrefix``).
    static let maxNameBytes = 4096 + 32
    /// Bytes of the manifest, declared and read, for an archive of `entries` entries whose
    /// names hold `nameBytes` bytes in all: a row of keys, digest and numbers per entry,
    /// each name up to six times over (JSON escapes a byte as `\u00XX`), and 16 MiB for
    /// the header, the database list and the deflate block lists (a few bytes per MiB of
    /// a database).
    static func maxManifestBytes(entries: Int, nameBytes: Int) -> Int64 {
        (16 << 20) + Int64(entries) * 512 + Int64(nameBytes) * 6
    }
    /// (Format 3.) An incremental backup's manifest lists the whole tree while the archive
    /// holds only what changed, so its size cannot be bounded by the entries: it may hold
    /// this many rows (files plus databases) and this many bytes whatever the entry count.
    static let maxChainManifestRows = 1_000_000
    static let maxChainManifestBytes: Int64 = 512 << 20
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
    /// Threads extracting small files side by side. They share the reader's one libzip
    /// handle (``SharedArchiveHandle``), taking turns for every read from it, so more
    /// threads would mostly wait for each other (large files still inflate on every core).
    static let maxExtractionHandles = 2
    /// Free space left on the target's file system after a restore: this share of it...
    static let reserveFraction = 0.05
    /// ...or this many bytes, whichever is larger.
    static let minimumReserveBytes: Int64 = 256 << 20
}
