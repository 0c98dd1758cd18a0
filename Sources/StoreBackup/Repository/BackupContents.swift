import Foundation

/// What a backup holds, as ``StoreHelper/listContents(_:matching:)`` reads it from the
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

/// The outcome of ``StoreHelper/extract(_:paths:into:progress:)``.
public struct ExtractResult: Sendable, Equatable {
    /// The backup the files came from (the resolved name when `latest` was asked for).
    public var backupName: String
    /// The folder that now holds them (absolute).
    public var directory: String
    /// Files, folders and links written.
    public var entryCount: Int
    /// Bytes of file content written.
    public var byteCount: Int64
    /// The databases written, each of which passed `PRAGMA integrity_check` (except any the
    /// ``warning`` names as damaged before the backup was made).
    public var databasesChecked: [String]
    /// What could not be checked, when ``StoreHelper/allowUnverified`` let a backup without
    /// a manifest through, or which databases were already damaged when the backup was made;
    /// nil otherwise.
    public var warning: String?
}

extension StoreHelper {
    /// Lists what a backup holds, from its manifest: every file, folder, link and database
    /// with its size, mode and time. Nothing is written and the store is not touched.
    ///
    /// A local folder's archive is read in place; from a remote destination only its central
    /// directory and manifest are read, with ranged requests (a server that ignores ranges:
    /// the archive is downloaded to a temporary file in `TMPDIR`, removed afterwards). An
    /// encrypted backup needs ``passwords``.
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest` for the newest.
    ///   - paths: Only these archive paths (a file, or a folder and everything beneath it);
    ///     empty lists everything.
    /// - Throws: ``StoreBackupError/notInBackup(name:paths:)`` when a path matches nothing,
    ///   ``StoreBackupError/corruptArchive(name:reason:)`` for an archive that cannot be read,
    ///   ``StoreBackupError/passwordRequired(name:)``, or a destination's error.
    public func listContents(_ nameOrLatest: String, matching paths: [String] = []) async throws -> BackupContents {
        try await browser.listContents(nameOrLatest, matching: paths)
    }

    /// Writes some files or folders of a backup (or all of it) into a new folder, without
    /// touching, locking or recovering the stores directory: one file back, without a restore.
    ///
    /// Every check a restore makes applies: the archive's names, sizes, links and manifest are
    /// checked as a whole before anything is written, each file written is checked against
    /// its SHA-256 and cut off at its declared size, nothing can land outside the folder, the
    /// declared sizes must fit the file system with a reserve left, and each database written
    /// (the consistent snapshot the backup holds) passes `PRAGMA integrity_check`.
    ///
    /// Paths keep their place in the backup: `paths: [".App_SUPPORT/_EXTERNAL_DATA/x"]` writes
    /// `<directory>/.App_SUPPORT/_EXTERNAL_DATA/x`. The files are unpacked into a temporary
    /// folder beside `directory` (named under the library's scratch policy, so a later run
    /// removes it if this one is killed), synced, then renamed into place: on failure there is
    /// no `directory`.
    ///
    /// - Parameters:
    ///   - nameOrLatest: A backup's name, or `latest` for the newest.
    ///   - paths: Archive paths to write (a file, or a folder and everything beneath it);
    ///     empty writes the whole backup.
    ///   - directory: The folder to create. It must not exist, or be an empty folder; its
    ///     parent must exist.
    ///   - progress: Called with ``BackupProgress`` updates on a worker thread.
    /// - Throws: ``StoreBackupError/extractRefused(reason:)`` for an unusable `directory`,
    ///   ``StoreBackupError/notInBackup(name:paths:)`` when a path matches nothing (nothing is
    ///   written), ``StoreBackupError/corruptArchive(name:reason:)``,
    ///   ``StoreBackupError/unsafeArchiveEntry(name:entry:)`` and
    ///   ``StoreBackupError/checksumMismatch(name:entry:)`` for a damaged or hostile backup,
    ///   ``StoreBackupError/cancelled``.
    public func extract(
        _ nameOrLatest: String, paths: [String] = [], into directory: String,
        progress: ProgressHandler? = nil
    ) async throws -> ExtractResult {
        try await browser.extract(nameOrLatest, paths: paths, into: directory, progress: progress)
    }

    /// This helper's destination, passwords and ``allowUnverified``, without its store.
    private var browser: BackupBrowser {
        var browser = BackupBrowser(destination: destination, passwords: passwords)
        browser.allowUnverified = allowUnverified
        browser.allowOutsideLinks = allowOutsideLinks
        return browser
    }
}
