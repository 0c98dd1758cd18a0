import Foundation

/// What a format-3 archive (docs/FORMAT.md: a full in a chain, or an incremental) has
/// beyond a format-2 one, prepared by the Incremental layer for ``ArchiveWriter``: store
/// files whose content stays in the base, extra entries (page deltas, page maps) and the
/// manifest's chain fields.
struct ArchiveChainParts: Sendable {
    /// A store file listed in the manifest without an entry of its own.
    struct NotStored: Sendable {
        var size: Int64
        var sha256: String
        /// The manifest's `source`: "base" or "pages".
        var source: String
    }

    /// A scratch file added as one of the archive's own entries, after the store's.
    struct ExtraEntry: Sendable {
        /// The entry's name, e.g. `.storebackup/pages/App.sqlite` (raw bytes, without NUL).
        var name: [UInt8]
        /// The scratch file's plain path.
        var path: String
        var size: Int64
        /// For a page delta: the path (escaped) of the database it patches, so that the
        /// manifest lists how the delta is stored (``Manifest/pageDeltas``).
        var patches: String? = nil
    }

    var kind: String
    var base: Manifest.Base?
    var chainLength: Int
    var hashSalt: String?
    var pageMaps: [Manifest.PageMap]
    /// By the store path (escaped).
    var notStored: [String: NotStored] = [:]
    var extraEntries: [ExtraEntry] = []

    static let format = 3
    static let formatMarker = ArchiveNames.format3Marker
    static let formatMarkerText = "storebackup archive format 3: see docs/FORMAT.md\n"
}
