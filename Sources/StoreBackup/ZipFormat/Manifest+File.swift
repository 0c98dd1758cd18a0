extension Manifest {
    /// One entry of the archive: a file, folder, link or database snapshot.
    ///
    /// Restore and verify hold one per entry of the archive, so it is stored compactly: the
    /// SHA-256 as its 32 bytes, the type as a byte, and the fields most rows leave out (link
    /// target, blocks, source, and any text the compact forms cannot give back exactly) in one
    /// shared box that most rows do not have. The properties read and write as plain values.
    struct File: Codable, Sendable, Equatable {
        // Declared first so that the optional's tag byte, the type and the mode share one
        // word: a row takes 80 bytes, not 88 (the fields are laid out in this order).
        private var digest: RawSHA256?
        private var typeCode: TypeCode
        /// Permission bits, e.g. 420 for 0644, with set-user-ID, set-group-ID and sticky.
        var mode: UInt32
        /// The path relative to the stores directory, in ``EscapedName``'s form (format 1
        /// wrote it as plain UTF-8; reading converts it).
        var path: String
        /// Size in bytes of the content (0 for folders).
        var size: Int64
        /// Seconds since 1970-01-01 UTC (negative before 1970).
        var mtime: Int64
        private var rare: Rare?

        init(
            path: String, type: String, size: Int64, sha256: String? = nil, mode: UInt32, mtime: Int64,
            linkTarget: String? = nil, deflateBlockSize: Int? = nil, deflateBlocks: [Int]? = nil, source: String? = nil,
            deflateBlockHashes: [RawSHA256]? = nil
        ) {
            self.path = path
            self.size = size
            self.mtime = mtime
            self.mode = mode
            typeCode = .other
            var rare = RareFields(
                linkTarget: linkTarget, deflateBlockSize: deflateBlockSize, deflateBlocks: deflateBlocks,
                deflateBlockHashes: deflateBlockHashes, source: source)
            (typeCode, rare.typeText) = Self.store(type: type)
            (digest, rare.sha256Text) = Self.store(sha256: sha256)
            self.rare = rare.isEmpty ? nil : Rare(rare)
        }

        /// A row whose SHA-256 was read as its bytes already (the manifest's streamed decoding,
        /// which so makes no hex text per row).
        init(
            path: String, type: String, size: Int64, digest: RawSHA256, mode: UInt32, mtime: Int64,
            linkTarget: String? = nil, deflateBlockSize: Int? = nil, deflateBlocks: [Int]? = nil, source: String? = nil,
            deflateBlockHashes: [RawSHA256]? = nil
        ) {
            self.init(
                path: path, type: type, size: size, mode: mode, mtime: mtime, linkTarget: linkTarget,
                deflateBlockSize: deflateBlockSize, deflateBlocks: deflateBlocks, source: source,
                deflateBlockHashes: deflateBlockHashes)
            self.digest = digest
        }

        /// "file", "directory", "symlink", "database" or (format 2) "fifo".
        var type: String {
            get { typeCode.text ?? rare?.fields.typeText ?? "" }
            set {
                let (code, text) = Self.store(type: newValue)
                typeCode = code
                change { $0.typeText = text }
            }
        }

        /// Hex SHA-256 of the content (files and databases; the target text for links).
        var sha256: String? {
            get { digest?.hex ?? rare?.fields.sha256Text }
            set {
                let (raw, text) = Self.store(sha256: newValue)
                digest = raw
                change { $0.sha256Text = text }
            }
        }

        /// Where a symbolic link points (links only), escaped like ``path``.
        var linkTarget: String? {
            get { rare?.fields.linkTarget }
            set { change { $0.linkTarget = newValue } }
        }

        /// For large deflated entries: the compressed size of each `deflateBlockSize`-byte
        /// block. storebackup deflates blocks independently, so restore can inflate them in parallel.
        var deflateBlockSize: Int? {
            get { rare?.fields.deflateBlockSize }
            set { change { $0.deflateBlockSize = newValue } }
        }

        /// The compressed size of each block, in order.
        var deflateBlocks: [Int]? {
            get { rare?.fields.deflateBlocks }
            set { change { $0.deflateBlocks = newValue } }
        }

        /// (Format 4.) The SHA-256 of each block's inflated bytes, in order, beside
        /// ``deflateBlocks``: a reader that takes one block (the backup VFS) checks it alone.
        var deflateBlockHashes: [RawSHA256]? {
            get { rare?.fields.deflateBlockHashes }
            set { change { $0.deflateBlockHashes = newValue } }
        }

        /// (Format 3, incrementals.) Where the content is: nil in this archive, "base" the
        /// base's content at the same path, "pages" a page delta in this archive.
        var source: String? {
            get { rare?.fields.source }
            set { change { $0.source = newValue } }
        }

        /// True when `hex` is this row's SHA-256, compared without making its text.
        func hasSHA256(_ hex: String?) -> Bool {
            guard let digest else { return hex == rare?.fields.sha256Text }
            return hex.flatMap(RawSHA256.init(hex:)) == digest
        }

        static func == (a: File, b: File) -> Bool {
            a.path == b.path && a.size == b.size && a.mtime == b.mtime && a.mode == b.mode && a.digest == b.digest
                && a.typeCode == b.typeCode && (a.rare?.fields ?? RareFields()) == (b.rare?.fields ?? RareFields())
        }

        private enum CodingKeys: String, CodingKey {
            case path, type, size, sha256, mode, mtime, linkTarget, deflateBlockSize, deflateBlocks, deflateBlockHashes, source
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                path: try container.decode(String.self, forKey: .path), type: try container.decode(String.self, forKey: .type),
                size: try container.decode(Int64.self, forKey: .size),
                sha256: try container.decodeIfPresent(String.self, forKey: .sha256),
                mode: try container.decode(UInt32.self, forKey: .mode), mtime: try container.decode(Int64.self, forKey: .mtime),
                linkTarget: try container.decodeIfPresent(String.self, forKey: .linkTarget),
                deflateBlockSize: try container.decodeIfPresent(Int.self, forKey: .deflateBlockSize),
                deflateBlocks: try container.decodeIfPresent([Int].self, forKey: .deflateBlocks),
                source: try container.decodeIfPresent(String.self, forKey: .source),
                deflateBlockHashes: try Self.blockHashes(container.decodeIfPresent([String].self, forKey: .deflateBlockHashes)))
        }

        /// Hashes in the form storebackup writes, or a decoding error (a reader cannot check
        /// a block against text it cannot compare). Page deltas' rows decode theirs with it too.
        static func blockHashes(_ texts: [String]?) throws -> [RawSHA256]? {
            guard let texts else { return nil }
            return try texts.map { text in
                guard let hash = RawSHA256(hex: text) else {
                    throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "a block hash is not 64 hex digits"))
                }
                return hash
            }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(path, forKey: .path)
            try container.encode(type, forKey: .type)
            try container.encode(size, forKey: .size)
            try container.encodeIfPresent(sha256, forKey: .sha256)
            try container.encode(mode, forKey: .mode)
            try container.encode(mtime, forKey: .mtime)
            try container.encodeIfPresent(linkTarget, forKey: .linkTarget)
            try container.encodeIfPresent(deflateBlockSize, forKey: .deflateBlockSize)
            try container.encodeIfPresent(deflateBlocks, forKey: .deflateBlocks)
            try container.encodeIfPresent(deflateBlockHashes?.map(\.hex), forKey: .deflateBlockHashes)
            try container.encodeIfPresent(source, forKey: .source)
        }

        /// The types storebackup writes, as a byte; `other` keeps its text in ``RareFields``.
        private enum TypeCode: UInt8, Sendable {
            case file, directory, symlink, database, fifo, other

            var text: String? {
                switch self {
                case .file: "file"
                case .directory: "directory"
                case .symlink: "symlink"
                case .database: "database"
                case .fifo: "fifo"
                case .other: nil
                }
            }
        }

        /// The fields most rows leave out, and the text of a type or SHA-256 not in the form
        /// storebackup writes (kept as it came, so that it is written back unchanged).
        private struct RareFields: Equatable, Sendable {
            var linkTarget: String?
            var deflateBlockSize: Int?
            var deflateBlocks: [Int]?
            var deflateBlockHashes: [RawSHA256]?
            var source: String?
            var typeText: String?
            var sha256Text: String?

            var isEmpty: Bool { self == RareFields() }
        }

        /// Shared between copies of a row; replaced, never changed, when a copy changes.
        private final class Rare: Sendable {
            let fields: RareFields
            init(_ fields: RareFields) { self.fields = fields }
        }

        private mutating func change(_ body: (inout RareFields) -> Void) {
            var fields = rare?.fields ?? RareFields()
            body(&fields)
            guard fields != (rare?.fields ?? RareFields()) else { return }
            rare = fields.isEmpty ? nil : Rare(fields)
        }

        private static func store(type: String) -> (TypeCode, String?) {
            switch type {
            case "file": (.file, nil)
            case "directory": (.directory, nil)
            case "symlink": (.symlink, nil)
            case "database": (.database, nil)
            case "fifo": (.fifo, nil)
            default: (.other, type)
            }
        }

        private static func store(sha256: String?) -> (RawSHA256?, String?) {
            guard let sha256 else { return (nil, nil) }
            return RawSHA256(hex: sha256).map { ($0, nil) } ?? (nil, sha256)
        }
    }
}
