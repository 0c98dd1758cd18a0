import CSQLite
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a store looks like from the outside, taken without reading its content: every
/// entry's kind, size, mtime, ctime and inode (from `lstat`), and for each known database
/// SQLite's file change counter and its WAL's header (checkpoint sequence and salts). Two
/// equal fingerprints mean no point is needed (docs/incremental-backups.md, "Points only
/// when something changed"); a difference means one may be.
///
/// Kept as a digest, so the chain state stays small whatever the number of files.
struct StoreFingerprint: Codable, Sendable, Equatable {
    /// Hex SHA-256 of the walk's lines.
    var digest: String
    /// How many entries the walk met.
    var entries: Int
    /// The databases whose headers it read: a later fingerprint to compare with reads the same.
    var databases: [String]
    /// When it was taken (wall clock, nanoseconds since 1970).
    var takenAtNanoseconds: Int64
    /// The newest mtime or ctime it saw (nanoseconds since 1970).
    var newestChangeNanoseconds: Int64

    /// Whether the store still looks as it did when `self` was taken (compared with the same
    /// databases' headers); false when the walk fails.
    func stillMatches(storesDirectory: String) -> Bool {
        guard let now = try? Self.take(storesDirectory: storesDirectory, databases: Set(databases)) else { return false }
        return now.digest == digest && now.entries == entries
    }

    /// Whether an entry changed so shortly before the fingerprint that a later change could
    /// share its time stamps and size (git's "racily clean"): such a fingerprint is not
    /// trusted to say nothing changed.
    func isRacy(windowNanoseconds: Int64 = ChangeDetector.racyWindowNanoseconds) -> Bool {
        newestChangeNanoseconds >= takenAtNanoseconds - windowNanoseconds
    }

    /// The fingerprint of `storesDirectory` now. `databases` are the store paths (escaped, as
    /// ``StoreItem/relativePath``) whose headers are read; a database's `-shm` is left out,
    /// since readers write to it without changing the database.
    static func take(storesDirectory: String, databases: Set<String>) throws -> StoreFingerprint {
        var walk = Walk(root: EscapedName.escapedRoot(FileSystem.absolutePath(storesDirectory)), databases: databases)
        try walk.visit(relative: "")
        return StoreFingerprint(
            digest: FileDigest.hex(walk.hasher.finalize()), entries: walk.entries, databases: databases.sorted(),
            takenAtNanoseconds: ChangeDetector.wallClockNanoseconds(), newestChangeNanoseconds: walk.newest)
    }

    private struct Walk {
        let root: String
        let databases: Set<String>
        var hasher = SHA256()
        var entries = 0
        var newest = Int64.min

        init(root: String, databases: Set<String>) {
            self.root = root
            self.databases = databases
        }

        mutating func visit(relative: String) throws {
            let directory = relative.isEmpty ? root : root + "/" + relative
            // A folder by its kind and mode only: its entries are listed below, and its times
            // move whenever a reader's WAL and shared-memory files come and go.
            entries += 1
            var info = stat()
            guard EscapedName.withSystemPath(directory, { lstat($0, &info) }) == 0 else {
                throw StoreBackupError.io(path: directory, operation: "stat", errno: errno)
            }
            hash("\(relative.isEmpty ? "." : relative)\0folder\t\(info.st_mode)\n")
            for name in try Self.names(in: directory).sorted() {
                let child = relative.isEmpty ? name : relative + "/" + name
                if name.hasSuffix("-shm"), databases.contains(String(child.dropLast(4))) { continue }
                var info = stat()
                guard EscapedName.withSystemPath(root + "/" + child, { lstat($0, &info) }) == 0 else {
                    // Gone since the folder was read (a rollback journal): a change already.
                    hash("\(child)\0gone\n")
                    continue
                }
                if (info.st_mode & S_IFMT) == S_IFDIR {
                    try visit(relative: child)
                } else {
                    add(child, path: root + "/" + child, info: info)
                }
            }
        }

        private mutating func add(_ relative: String, path: String, info: stat) {
            let mtime = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
            var ctime = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
            var extra = ""
            if databases.contains(relative) {
                // The file change counter (header bytes 24-27): rollback-journal commits bump it.
                extra = "\tcounter=\(Self.hex(Self.read(path, count: 4, at: 24)))"
            } else if relative.hasSuffix("-wal"), databases.contains(String(relative.dropLast(4))) {
                // Checkpoint sequence and salts (bytes 12-23): a WAL restarted in place changes them.
                extra = "\twal=\(Self.hex(Self.read(path, count: 12, at: 12)))"
                // Not its ctime: SQLite running as root chowns the WAL at every open, a reader's too.
                ctime = 0
            }
            newest = max(newest, mtime, ctime)
            entries += 1
            hash("\(relative)\0\(info.st_mode)\t\(info.st_size)\t\(mtime)\t\(ctime)\t\(info.st_ino)\(extra)\n")
        }

        private mutating func hash(_ line: String) { hasher.update(data: Array(line.utf8)) }

        /// Bytes of a database or its WAL, read through SQLite's VFS: closing a descriptor of
        /// our own would drop the locks an app in this process holds on the file.
        static func read(_ path: String, count: Int, at offset: Int64) -> [UInt8]? {
            var bytes = [UInt8](repeating: 0, count: count)
            let rc = bytes.withUnsafeMutableBytes { buffer in
                EscapedName.withSystemPath(path) { sb_sqlite_vfs_read($0, buffer.baseAddress!, Int32(count), offset) }
            }
            return rc == SQLITE_OK ? bytes : nil
        }

        static func hex(_ bytes: [UInt8]?) -> String { bytes.map { FileDigest.hex($0) } ?? "none" }

        static func names(in directory: String) throws -> [String] {
            guard let handle = EscapedName.withSystemPath(directory, { opendir($0) }) else {
                throw StoreBackupError.storesDirectoryUnreadable(path: directory, reason: String(cString: strerror(errno)))
            }
            defer { closedir(handle) }
            var names: [String] = []
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { EscapedName.escape($0.prefix(while: { $0 != 0 })) }
                if name != "." && name != ".." { names.append(name) }
            }
            return names
        }
    }
}
