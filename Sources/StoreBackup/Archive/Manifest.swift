import Foundation

/// The description of a backup that travels inside it, at `.storebackup/manifest.json`.
/// Restore and verify check every entry against it.
public struct Manifest: Codable, Sendable, Equatable {
    public static let archivePath = ".storebackup/manifest.json"
    public static let currentFormat = 1

    public struct File: Codable, Sendable, Equatable {
        public var path: String
        /// "file", "directory", "symlink" or "database".
        public var type: String
        public var size: Int64
        /// Hex SHA-256 of the content (files and databases; the target text for links).
        public var sha256: String?
        /// Permission bits, e.g. 420 for 0644.
        public var mode: UInt32
        /// Seconds since 1970-01-01 UTC.
        public var mtime: Int64
        public var linkTarget: String?
        /// For large deflated entries: the compressed size of each `deflateBlockSize`-byte
        /// block. storebackup deflates blocks independently, so restore can inflate them in parallel.
        public var deflateBlockSize: Int?
        public var deflateBlocks: [Int]?
    }

    public struct Database: Codable, Sendable, Equatable {
        public var path: String
        public var pageSize: Int
        public var pageCount: Int
        public var journalMode: String
        /// How the consistent snapshot was taken (see DatabaseSnapshot).
        public var snapshotMethod: String
    }

    public var format: Int
    public var tool: String
    public var toolVersion: String
    public var hostName: String
    public var sourcePath: String
    public var createdAt: Date
    public var compressionLevel: Int
    /// Mode and mtime of the stores directory itself (restored onto the new directory).
    public var rootMode: UInt32?
    public var rootMtime: Int64?
    public var files: [File]
    public var databases: [Database]

    func encoded() throws -> Data {
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

public enum StoreBackupVersion {
    public static let current = "0.1.0"
}
