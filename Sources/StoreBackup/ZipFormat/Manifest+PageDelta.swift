import Foundation

extension Manifest {
    /// (Format 4, optional.) How one page delta entry (`.storebackup/pages/<name>`) is
    /// stored: its size and SHA-256 and, when it is deflated in more than one block, its block
    /// list and block hashes as a ``File`` row gives them. With them a reader takes one
    /// record of the delta out of one block, checked alone (docs/FORMAT.md, Format 4). Readers
    /// that do not know the field ignore it and read the delta whole, as before.
    struct PageDelta: Codable, Sendable, Equatable {
        /// The path (escaped) of the database the delta patches, as in ``File/path``.
        var path: String
        /// The delta entry's bytes, uncompressed.
        var size: Int64
        /// Hex SHA-256 of those bytes.
        var sha256: String
        var deflateBlockSize: Int?
        var deflateBlocks: [Int]?
        var deflateBlockHashes: [RawSHA256]?

        init(
            path: String, size: Int64, sha256: String, deflateBlockSize: Int? = nil, deflateBlocks: [Int]? = nil,
            deflateBlockHashes: [RawSHA256]? = nil
        ) {
            self.path = path
            self.size = size
            self.sha256 = sha256
            self.deflateBlockSize = deflateBlockSize
            self.deflateBlocks = deflateBlocks
            self.deflateBlockHashes = deflateBlockHashes
        }

        private enum CodingKeys: String, CodingKey {
            case path, size, sha256, deflateBlockSize, deflateBlocks, deflateBlockHashes
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            path = try container.decode(String.self, forKey: .path)
            size = try container.decode(Int64.self, forKey: .size)
            sha256 = try container.decode(String.self, forKey: .sha256)
            deflateBlockSize = try container.decodeIfPresent(Int.self, forKey: .deflateBlockSize)
            deflateBlocks = try container.decodeIfPresent([Int].self, forKey: .deflateBlocks)
            deflateBlockHashes = try File.blockHashes(container.decodeIfPresent([String].self, forKey: .deflateBlockHashes))
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(path, forKey: .path)
            try container.encode(size, forKey: .size)
            try container.encode(sha256, forKey: .sha256)
            try container.encodeIfPresent(deflateBlockSize, forKey: .deflateBlockSize)
            try container.encodeIfPresent(deflateBlocks, forKey: .deflateBlocks)
            try container.encodeIfPresent(deflateBlockHashes?.map(\.hex), forKey: .deflateBlockHashes)
        }

        /// The delta as a ``File`` row of the entry named `entryPath`, for the readers that
        /// serve an entry's blocks from its row.
        func row(entryPath: String) -> File {
            File(
                path: entryPath, type: "file", size: size, sha256: sha256, mode: 0o600, mtime: 0, deflateBlockSize: deflateBlockSize,
                deflateBlocks: deflateBlocks, deflateBlockHashes: deflateBlockHashes)
        }
    }
}
