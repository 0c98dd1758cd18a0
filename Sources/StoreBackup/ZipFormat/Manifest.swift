import Foundation

/// The description of a backup that travels inside it, at `.storebackup/manifest.json`.
/// Restore and verify check every entry against it.
public struct Manifest: Codable, Sendable, Equatable {
    /// Where the manifest sits inside every archive.
    public static let archivePath = ".storebackup/manifest.json"
    /// The manifest format this version writes.
    public static let currentFormat = 1

    /// One entry of the archive: a file, folder, link or database snapshot.
    public struct File: Codable, Sendable, Equatable {
        /// The path relative to the stores directory.
        public var path: String
        /// "file", "directory", "symlink" or "database".
        public var type: String
        /// Size in bytes of the content (0 for folders).
        public var size: Int64
        /// Hex SHA-256 of the content (files and databases; the target text for links).
        public var sha256: String?
        /// Permission bits, e.g. 420 for 0644.
        public var mode: UInt32
        /// Seconds since 1970-01-01 UTC.
        public var mtime: Int64
        /// Where a symbolic link points (links only).
        public var linkTarget: String?
        /// For large deflated entries: the compressed size of each `deflateBlockSize`-byte
        /// block. storebackup deflates blocks independently, so restore can inflate them in parallel.
        public var deflateBlockSize: Int?
        /// The compressed size of each block, in order.
        public var deflateBlocks: [Int]?
    }

    /// How one database was snapshotted.
    public struct Database: Codable, Sendable, Equatable {
        /// The database's path relative to the stores directory.
        public var path: String
        /// SQLite page size in bytes.
        public var pageSize: Int
        /// Pages in the snapshot.
        public var pageCount: Int
        /// "wal", "delete", … as `PRAGMA journal_mode` reported it.
        public var journalMode: String
        /// How the consistent snapshot was taken (see DatabaseSnapshot).
        public var snapshotMethod: String
    }

    /// The manifest format (``currentFormat`` when written by this version).
    public var format: Int
    /// The program that wrote the backup: "storebackup".
    public var tool: String
    /// Its version.
    public var toolVersion: String
    /// The host the backup was made on.
    public var hostName: String
    /// The stores directory that was backed up.
    public var sourcePath: String
    /// When the backup was made.
    public var createdAt: Date
    /// The deflate level used (0: stored).
    public var compressionLevel: Int
    /// Mode and mtime of the stores directory itself (restored onto the new directory).
    public var rootMode: UInt32?
    /// The stores directory's own modification time (seconds since 1970 UTC).
    public var rootMtime: Int64?
    /// Every entry of the archive except the manifest.
    public var files: [File]
    /// Every database snapshot, also listed in ``files``.
    public var databases: [Database]

    /// The JSON text, written row by row (``ManifestWriter``) rather than through
    /// `JSONEncoder`, whose value tree of the whole document costs memory per row.
    func encoded() throws -> Data {
        ManifestWriter.encode(self)
    }

    /// The same text through `JSONEncoder`, for tests comparing the two.
    func encodedByFoundation() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return try encoder.encode(self)
    }

    static func decode(_ data: Data) throws -> Manifest {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(Manifest.self, from: data)
    }
}

/// The library's version, written into every manifest.
package enum StoreBackupVersion {
    /// The version string, e.g. "0.1.0".
    package static let current = "0.1.0"
}
