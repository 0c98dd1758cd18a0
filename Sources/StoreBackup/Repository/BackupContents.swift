import Foundation

/// What a backup holds, as ``BackupRepository/contents(of:matching:)`` reads it from the
/// backup's manifest.
public struct BackupContents: Sendable, Equatable {
    /// One file, folder, link or database of the backup.
    public struct Entry: Sendable, Equatable {
        /// The path inside the backup, relative to the stores directory (e.g. `App.sqlite`,
        /// `.App_SUPPORT/_EXTERNAL_DATA/<uuid>`).
        public var path: String
        /// "file", "directory", "symlink" or "database".
        public var type: String
        /// Size in bytes (0 for folders; for links, the length of the target).
        public var size: Int64
        /// Permission bits, e.g. 0o644.
        public var mode: UInt32
        /// The modification time recorded in the backup.
        public var modified: Date
        /// Where a link points (links only).
        public var linkTarget: String?
        /// Hex SHA-256 of the content, as the manifest records it; nil without a manifest.
        public var sha256: String? {
            get { digest?.hex ?? digestText }
            set {
                digest = newValue.flatMap(RawSHA256.init(hex:))
                digestText = digest == nil ? newValue : nil
            }
        }
        /// A listing holds one entry per file: the SHA-256 is kept as its 32 bytes, not as a
        /// 64-character string (a heap block per entry); text in another form is kept as it came.
        private var digest: RawSHA256?
        private var digestText: String?
        /// (Incremental backups.) The earlier backup of the chain whose archive holds the
        /// content (the file is unchanged since then); nil when it is in this backup's archive.
        public var storedIn: String? = nil
        /// (Incremental backups.) A database rebuilt from page deltas: the newest delta is in
        /// ``storedIn`` (or this backup), the rest in earlier backups of the chain.
        public var patchedByPages = false

        init(
            path: String, type: String, size: Int64, mode: UInt32, modified: Date, linkTarget: String? = nil,
            sha256: String? = nil, storedIn: String? = nil, patchedByPages: Bool = false
        ) {
            self.path = path
            self.type = type
            self.size = size
            self.mode = mode
            self.modified = modified
            self.linkTarget = linkTarget
            self.storedIn = storedIn
            self.patchedByPages = patchedByPages
            self.sha256 = sha256
        }
    }

    /// The backup's name (the resolved one when `latest` was asked for).
    public var backupName: String
    /// True when the list comes from the backup's manifest; false for a backup without
    /// one (made by hand or by another tool), listed from its ZIP directory instead.
    public var hasManifest: Bool
    /// When the backup was made, from its manifest.
    public var createdAt: Date?
    /// The host that made it, from its manifest.
    public var hostName: String?
    /// The stores directory it was made from, from its manifest.
    public var sourcePath: String?
    /// The entries, sorted by path.
    public var entries: [Entry]
}

/// The outcome of ``BackupRepository/extract(_:paths:into:options:progress:)``.
public struct ExtractResult: Sendable, Equatable {
    /// The backup the files came from (the resolved name when `latest` was asked for).
    public var backupName: String
    /// The folder that now holds them (absolute).
    public var directory: String
    /// Files, folders and links written.
    public var entryCount: Int
    /// Bytes of file content written.
    public var byteCount: Int64
    /// The databases written, each of which passed `PRAGMA integrity_check` or is covered by a
    /// trusted proof (``ExtractionOptions/proofKey``), except any the ``warning`` names as
    /// damaged before the backup was made.
    public var databasesChecked: [String]
    /// What could not be checked, when ``ExtractionOptions/allowUnverified`` let a backup without
    /// a manifest through, or which databases were already damaged when the backup was made;
    /// nil otherwise.
    public var warning: String?
}
