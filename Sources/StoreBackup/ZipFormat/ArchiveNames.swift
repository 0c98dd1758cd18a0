import Foundation

/// How a store's paths become entry names in the archive, and back (format 2).
///
/// The archive reserves the top-level folder `.storebackup/` for storebackup's own entries
/// (the manifest and the format marker). A store may hold a `.storebackup` of its own: that
/// entry and everything beneath it go under ``storePrefix`` instead, so
/// `.storebackup/cache/x` is stored as `.storebackup/store/.storebackup/cache/x`, and every
/// other path is stored under its own name. Names are the path's raw bytes.
enum ArchiveNames {
    /// The prefix of a store's own `.storebackup` entries.
    static let storePrefix = StoreScanner.reservedFolder + "/store/"
    /// An entry every format-2 archive holds. storebackup 0.1.0 refuses an archive with any
    /// `.storebackup/` entry but the manifest as unsafe, so it refuses format-2 archives
    /// instead of restoring them without what 0.1.0 cannot read (FIFOs, times past 2038,
    /// a store's own `.storebackup`).
    static let formatMarker = StoreScanner.reservedFolder + "/format-2"
    /// What the marker holds.
    static let formatMarkerText = "storebackup archive format 2: see docs/FORMAT.md\n"
    /// The format plain `create` writes (the marker's): 2, whatever the newest format this
    /// build reads (``Manifest/currentFormat``), so that teaching the readers a newer format
    /// never changes what plain `create` writes. Chains write format 3 (``ArchiveChainParts``).
    static let plainFormat = 2

    /// Whether `path` (a store's path) is the store's own `.storebackup` or beneath it.
    static func isInReservedFolder(_ path: String) -> Bool {
        path == StoreScanner.reservedFolder || path.hasPrefix(StoreScanner.reservedFolder + "/")
    }

    /// The raw entry name for a store's escaped `path` (a folder's without its trailing slash),
    /// NUL-terminated for libzip.
    static func entryName(for path: String) -> [CChar] {
        let mapped = isInReservedFolder(path) ? storePrefix + path : path
        return EscapedName.bytes(mapped).map { CChar(bitPattern: $0) } + [0]
    }

    /// (Format 3.) The marker of fulls of a chain and incremental backups.
    static let format3Marker = StoreScanner.reservedFolder + "/format-3"
    /// (Format 4.) The marker of archives whose manifest gives each block of a block-deflated
    /// entry its SHA-256 (`deflateBlockHashes`).
    static let format4Marker = StoreScanner.reservedFolder + "/format-4"
    /// The format of block hashes, written by any archive that has a block list.
    static let blockHashFormat = 4

    /// The marker entry of an archive of `format` (2 or more).
    static func marker(format: Int) -> String { StoreScanner.reservedFolder + "/format-\(format)" }
    /// What the marker of `format` holds.
    static func markerText(format: Int) -> String { "storebackup archive format \(format): see docs/FORMAT.md\n" }

    /// (Format 3.) Page deltas: `<prefix><the database's entry name>`.
    static let pageDeltaPrefix = StoreScanner.reservedFolder + "/pages/"
    /// (Format 3.) Page maps: `<prefix><the database's entry name>`.
    static let pageMapPrefix = StoreScanner.reservedFolder + "/pagemap/"

    /// The store path an escaped entry name stands for, or nil when the name is one of the
    /// archive's own (the manifest, the marker, the reserved folder) or not one this format
    /// writes under `.storebackup/`. `format` is the one the archive's marker announces:
    /// format 3's own entries (page deltas and maps) are unknown, so unsafe, in older archives.
    static func storePath(forEntryName name: String, format: Int = 2) -> StorePathResult {
        guard name == StoreScanner.reservedFolder || name.hasPrefix(StoreScanner.reservedFolder + "/") else {
            return .store(name)
        }
        if name == StoreScanner.reservedFolder || name == Manifest.archivePath || name == formatMarker
            || name == StoreScanner.reservedFolder + "/store"
        {
            return .own
        }
        if format >= 3 {
            if name == format3Marker || (format >= 4 && name == format4Marker) { return .own }
            for prefix in [pageDeltaPrefix, pageMapPrefix] where name.hasPrefix(prefix) {
                // The rest is a database's own entry name, itself mapped like any other.
                guard case .store(let database) = storePath(forEntryName: String(name.dropFirst(prefix.count))) else {
                    return .unknown
                }
                return prefix == pageDeltaPrefix ? .pageDelta(database) : .own
            }
        }
        if name.hasPrefix(storePrefix) {
            let rest = String(name.dropFirst(storePrefix.count))
            if isInReservedFolder(rest) { return .store(rest) }
        }
        return .unknown
    }

    enum StorePathResult: Equatable {
        /// A store's path.
        case store(String)
        /// One of the archive's own entries.
        case own
        /// (Format 3.) The page delta of the database at this store path.
        case pageDelta(String)
        /// Under `.storebackup/` but nothing this format writes there.
        case unknown
    }
}
