import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What the last backup of a chain was, kept beside the store so the next backup to the
/// same destination can be an incremental one: its name and manifest hash, the files it
/// held (with the stat fields that let unchanged files be skipped) and each database's
/// complete page map, and a copy of its manifest. Every file of the state carries its
/// SHA-256 here, and the state itself a checksum (``ChainFolder``): any doubt about it makes
/// the next backup a full one.
struct ChainState: Codable, Sendable {
    struct Database: Codable, Sendable {
        /// The database's path in the store (escaped).
        var path: String
        var pageSize: Int
        var pages: Int
        /// The page map's file name in the state folder.
        var map: String
        /// Hex SHA-256 of the page map file.
        var mapSHA256: String = ""
        /// The quick map's file name in the state folder (``QuickPageMap``); nil: none (an
        /// encrypted chain, or a state written before quick maps).
        var quickMap: String? = nil
        /// Hex SHA-256 of the quick map file.
        var quickMapSHA256: String? = nil
        /// When every page of the database was last hashed with the page hasher (none taken
        /// over by its quick value): the quick map is trusted only within `full-scan-every` of it.
        var pagesHashedAt: Date? = nil
    }

    /// Version 2 added the checksums and the manifest copy: a version-1 state (which had
    /// neither) is not trusted, so the first backup after an upgrade is a full one.
    static let currentVersion = 2

    var version = currentVersion
    /// The destination's display name (the folder's key is its hash).
    var destination: String
    /// The last backup's name at the destination.
    var backupName: String
    /// Hex SHA-256 of its manifest bytes.
    var manifestSHA256: String
    var createdAt: Date
    /// Its size in bytes at the destination.
    var archiveSize: Int64
    var chainLength: Int
    /// When the chain's full backup was made (for the full-every policy).
    var fullCreatedAt: Date
    var encrypted: Bool
    /// Hex salt of the keyed hashes (encrypted chains).
    var hashSalt: String?
    /// ``PageHasher/keyCheck`` of the chain key: a new password makes a new chain.
    var keyCheck: String?
    /// The file list's file name in the state folder.
    var filesList: String
    /// Hex SHA-256 of the file list.
    var filesListSHA256: String = ""
    /// The file name, in the state folder, of a copy of the last backup's manifest (its
    /// SHA-256 is ``manifestSHA256``): what an incremental on it is proven against.
    var baseManifest: String = ""
    var databases: [Database]
    /// The store as it looked just before this backup read it (nil: a state written before
    /// fingerprints): the scheduler makes no point while the store still looks so.
    var fingerprint: StoreFingerprint? = nil
    /// The chain at the destination as this host published it, full first (nil: unknown): what
    /// create needs to know of the destination for the next point without listing it; the
    /// destination is listed again at each full.
    var links: [PublishedLink]? = nil
    /// The destination said the chain's full (or its first point) carries no lock (S3 Object
    /// Lock): its points need not ask again. Nil: not known.
    var pointsUnlocked: Bool? = nil
    /// When the destination was last listed for this chain (``links`` are trusted only so long).
    var listedAt: Date? = nil
    /// The chain's newest points that could not reach the destination and wait in the spool
    /// (``ChainFolder/spoolPath(of:)``), oldest first; they are the last of ``links``.
    var spooled: [PublishedLink]? = nil
    /// When the store was last read for a point, published or found unchanged
    /// (``ChainBuild/recordUnchanged()``); nil: at ``createdAt``.
    var scannedAt: Date? = nil
    /// With levels on an S3 Object Lock chain: the level each of the chain's points was last
    /// locked for (docs/levels.md), so a point promoted to an hour's or a day's head is
    /// extended once.
    var levelLocked: [String: PointLevel]? = nil
    /// When a backup of the chain last carried a proof of every database (a full, or a point
    /// checked by ``CreateOptions/provePointsEvery``); nil: none known.
    var provenAt: Date? = nil
}

/// One backup of a chain as it was published: its name and size at the destination.
struct PublishedLink: Codable, Sendable, Equatable {
    var name: String
    var size: Int64
}

/// One regular file as the last backup held it.
struct FileRecord: Sendable, Equatable {
    var stat: FileStat
    var sha256: String
}

/// The stat fields that say a file was not touched (restic's rule: all must match).
struct FileStat: Sendable, Equatable {
    var size: Int64
    var mtimeNanoseconds: Int64
    var ctimeNanoseconds: Int64
    var inode: UInt64
}
