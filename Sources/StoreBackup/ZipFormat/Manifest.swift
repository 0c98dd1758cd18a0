import Foundation

/// The description of a backup that travels inside it, at `.storebackup/manifest.json`.
/// Restore and verify check every entry against it.
struct Manifest: Codable, Sendable, Equatable {
    /// Where the manifest sits inside every archive.
    static let archivePath = ".storebackup/manifest.json"
    /// The manifest format this version writes. Format 2 (see docs/FORMAT.md): paths
    /// and link targets escaped (`%XX` for bytes that are not plain UTF-8), FIFOs,
    /// set-user-ID/set-group-ID/sticky bits, times outside 1970-2038, the store's own
    /// `.storebackup` under `.storebackup/store/`, ``outsideLinks``, and the marker entry
    /// `.storebackup/format-2`.
    static let currentFormat = 2
    /// The newest manifest format this version reads (format 4: block hashes beside the
    /// block lists, see docs/FORMAT.md). Readers refuse anything newer.
    static let newestReadableFormat = 4

    /// (Format 3.) The backup an incremental applies onto.
    struct Base: Codable, Sendable, Equatable {
        /// The base's file name at the destination.
        var name: String
        /// Hex SHA-256 of the base's `manifest.json` bytes (decrypted).
        var manifestSHA256: String
        /// The base's `createdAt`.
        var createdAt: Date

        init(name: String, manifestSHA256: String, createdAt: Date) {
            self.name = name
            self.manifestSHA256 = manifestSHA256
            self.createdAt = createdAt
        }
    }

    /// (Format 3.) The page map an archive holds for one database.
    struct PageMap: Codable, Sendable, Equatable {
        /// The database's path, escaped as in ``File/path``.
        var path: String
        /// "sha256-128" or "hmac-sha256-128".
        var hash: String
        /// True when the map has a hash for every page (a full), false for changed pages only.
        var complete: Bool

        init(path: String, hash: String, complete: Bool) {
            self.path = path
            self.hash = hash
            self.complete = complete
        }
    }

    /// How one database was snapshotted.
    struct Database: Codable, Sendable, Equatable {
        /// The database's path relative to the stores directory.
        var path: String
        /// SQLite page size in bytes.
        var pageSize: Int
        /// Pages in the snapshot.
        var pageCount: Int
        /// "wal", "delete", … as `PRAGMA journal_mode` reported it.
        var journalMode: String
        /// How the consistent snapshot was taken (see DatabaseSnapshot).
        var snapshotMethod: String
        /// Create's `integrity_check` of the snapshot, authenticated; nil when none was made.
        var proof: DatabaseProof? = nil
    }

    /// The manifest format (``currentFormat`` when written by this version).
    var format: Int
    /// The program that wrote the backup: "storebackup".
    var tool: String
    /// Its version.
    var toolVersion: String
    /// The host the backup was made on.
    var hostName: String
    /// The stores directory that was backed up.
    var sourcePath: String
    /// When the backup was made.
    var createdAt: Date
    /// The deflate level used (0: stored).
    var compressionLevel: Int
    /// Mode and mtime of the stores directory itself (restored onto the new directory).
    var rootMode: UInt32?
    /// The stores directory's own modification time (seconds since 1970 UTC).
    var rootMtime: Int64?
    /// Every entry of the archive except the manifest.
    var files: [File]
    /// Every database snapshot, also listed in ``files``.
    var databases: [Database]
    /// (Format 2.) The links whose target leaves the stores directory (or loops), as
    /// `create` found them and warned about them. Restore and verify refuse such links
    /// unless told to allow them, and then only the ones listed here.
    var outsideLinks: [String]? = nil
    /// (Format 2.) Sockets and device files that were left out, each as "path (what it is)".
    var leftOut: [String]? = nil
    /// (Format 3.) "full" or "incremental"; nil in formats 1 and 2 (always a full).
    var kind: String? = nil
    /// (Format 3, incrementals only.) The backup this one applies onto.
    var base: Base? = nil
    /// (Format 3.) 0 for a full, the base's chainLength + 1 for an incremental.
    var chainLength: Int? = nil
    /// (Format 3, encrypted chains.) Hex salt of the keyed page hashes.
    var hashSalt: String? = nil
    /// (Format 3.) The page map the archive holds for each database.
    var pageMaps: [PageMap]? = nil
    /// (Format 4, optional.) How each page delta of the archive is stored, its block list
    /// and block hashes: nil in archives written before them (their deltas are read whole).
    var pageDeltas: [PageDelta]? = nil
    /// Hex salt of the password-keyed database proofs (encrypted backups with proofs).
    var proofSalt: String? = nil

    /// Whether this manifest describes an incremental backup, which restores only on top of
    /// its chain (its base named, or some content left in earlier backups).
    var isIncremental: Bool {
        kind == "incremental" || base != nil || files.contains { $0.source != nil }
    }

    /// The JSON text, written row by row (``ManifestWriter``) rather than through
    /// `JSONEncoder`, whose value tree of the whole document costs memory per row.
    func encoded() throws -> Data {
        ManifestWriter.encode(self)
    }

    /// The same text through `JSONEncoder`, for tests comparing the two.
    func encodedByFoundation() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .utcTimestamp
        return try encoder.encode(self)
    }

    /// Only the manifest's `format` field, which every format keeps (readers check it first).
    static func decodeFormat(_ data: Data) throws -> Int {
        struct FormatOnly: Decodable { var format: Int }
        return try JSONDecoder().decode(FormatOnly.self, from: data).format
    }

    /// Entries named `.storebackup/format-N` (N a decimal number) mark an archive of format N.
    static let formatMarkerPrefix = ".storebackup/format-"

    /// N for an entry named ``formatMarkerPrefix`` + N, from its raw name; nil for any other name.
    static func format(ofMarkerEntry raw: UnsafeRawBufferPointer) -> Int? {
        let prefix = formatMarkerPrefix.utf8
        guard raw.count > prefix.count, raw.starts(with: prefix) else { return nil }
        return raw.withMemoryRebound(to: CChar.self) { chars in
            let terminated = Array(chars) + [0]
            return format(ofMarkerEntry: terminated)
        }
    }

    static func format(ofMarkerEntry raw: UnsafePointer<CChar>) -> Int? {
        // Every entry's name passes here: compare bytes before making a String.
        guard strncmp(raw, formatMarkerPrefix, formatMarkerPrefix.utf8.count) == 0 else { return nil }
        let name = String(decoding: UnsafeRawBufferPointer(start: raw, count: strlen(raw)), as: UTF8.self)
        let digits = name.dropFirst(formatMarkerPrefix.count)
        guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(digits)
    }

    static func decode(_ data: Data) throws -> Manifest {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .utcTimestamp
        var manifest = try decoder.decode(Manifest.self, from: data)
        if manifest.format < 2 { manifest.escapeFormat1Paths() }
        return manifest
    }

    /// Format 1 wrote paths and link targets as plain UTF-8: give them the escaped form
    /// every reader compares with (only a `%` or an unusual spelling changes).
    mutating func escapeFormat1Paths() {
        for index in files.indices {
            files[index].path = EscapedName.escape(plain: files[index].path)
            files[index].linkTarget = files[index].linkTarget.map { EscapedName.escape(plain: $0) }
        }
        for index in databases.indices {
            databases[index].path = EscapedName.escape(plain: databases[index].path)
        }
    }
}
