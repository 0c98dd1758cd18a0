import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One thing in the stores directory that goes into the archive.
struct StoreItem: Sendable {
    enum Kind: String, Codable, Sendable { case directory, file, symlink, database, fifo }

    /// Path relative to the stores directory, "/"-separated, never starting with "/", in
    /// ``EscapedName``'s form (names are bytes; this keeps every byte).
    let relativePath: String
    /// The stores directory's path joined with ``relativePath``, escaped the same way: give
    /// it to system calls through ``EscapedName/withSystemPath(_:_:)``.
    let absolutePath: String
    let kind: Kind
    /// Permission bits with set-user-ID, set-group-ID and sticky (no file-type bits).
    let permissions: UInt32
    /// Modification time in whole seconds since 1970, UTC (negative before 1970).
    let modificationTime: Int64
    /// Bytes on disk when scanned (for a database, the snapshot's size replaces it).
    let size: Int64
    /// Where a link points, escaped like the paths (links only).
    let linkTarget: String?
}

/// Walks a stores directory: everything, hidden files and empty folders included,
/// without following symbolic links. SQLite files are recognised by their header;
/// their `-wal`, `-shm` and `-journal` companions are left out because the snapshot
/// of each database is already consistent without them. Sockets and device files cannot
/// be backed up: they are left out and named in ``Result/leftOut``.
enum StoreScanner {
    /// The archive folder reserved for storebackup's own entries (the manifest). A store's
    /// own `.storebackup` goes into the archive too, under ``ArchiveNames``' prefix.
    static let reservedFolder = ".storebackup"

    /// The files SQLite keeps beside a database `X`: `X-wal`, `X-shm`, `X-journal`.
    static let companionSuffixes = ["-wal", "-shm", "-journal"]

    struct Result: Sendable {
        var items: [StoreItem]
        /// Sockets and device files, each as "path (what it is)", left out of the backup.
        var leftOut: [String]
        /// The stores directory's own permission bits and modification time, as scanned:
        /// snapshotting a WAL database afterwards makes and removes files in it.
        var rootPermissions: UInt32 = 0o755
        var rootModificationTime: Int64 = 0
    }

    static func scan(storesDirectory root: String) throws -> Result {
        var info = stat()
        guard stat(root, &info) == 0 else {
            if errno == ENOENT { throw StoreBackupError.storesDirectoryMissing(path: root) }
            throw StoreBackupError.storesDirectoryUnreadable(path: root, reason: String(cString: strerror(errno)))
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw StoreBackupError.storesDirectoryUnreadable(path: root, reason: "not a directory")
        }
        guard access(root, R_OK | X_OK) == 0 else {
            throw StoreBackupError.storesDirectoryUnreadable(path: root, reason: String(cString: strerror(errno)))
        }
        var result = Result(
            items: [], leftOut: [], rootPermissions: UInt32(info.st_mode) & 0o7777,
            rootModificationTime: Int64(info.st_mtim.tv_sec))
        try walk(root: EscapedName.escapedRoot(root), relative: "", into: &result)
        return result
    }

    /// The names in a folder, escaped, from their raw bytes.
    private static func names(in directory: String) throws -> [String] {
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

    /// A link's target as its raw bytes, escaped.
    static func linkTarget(_ path: String) -> String {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = EscapedName.withSystemPath(path) { readlink($0, &buffer, buffer.count) }
        guard length >= 0 else { return "" }
        return EscapedName.escape(buffer[0..<length])
    }

    private static func walk(root: String, relative: String, into result: inout Result) throws {
        let directory = relative.isEmpty ? root : root + "/" + relative
        // Sorted by bytes (the escaped form sorts as its bytes do for ASCII), so a name
        // sorts before its companions'.
        let names = try names(in: directory).sorted()

        // Databases of this folder found so far.
        var databaseNames = Set<String>()
        for name in names {
            let childRelative = relative.isEmpty ? name : relative + "/" + name
            let childPath = root + "/" + childRelative
            var info = stat()
            guard EscapedName.withSystemPath(childPath, { lstat($0, &info) }) == 0 else {
                throw StoreBackupError.io(path: childPath, operation: "stat", errno: errno)
            }
            let permissions = UInt32(info.st_mode) & 0o7777
            let mtime = Int64(info.st_mtim.tv_sec)
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                result.items.append(
                    StoreItem(
                        relativePath: childRelative, absolutePath: childPath, kind: .directory,
                        permissions: permissions, modificationTime: mtime, size: 0, linkTarget: nil))
                try walk(root: root, relative: childRelative, into: &result)
            case S_IFREG:
                // A database's companions are left out, unread: SQLite's VFS keeps a
                // descriptor open only for a database file it has open, so reading the
                // header of an app's `-shm` would drop the app's locks on it.
                if companionSuffixes.contains(where: { name.hasSuffix($0) && databaseNames.contains(String(name.dropLast($0.count))) }) {
                    continue
                }
                let isDatabase = info.st_size >= 512 && SQLiteHeader.isDatabase(path: childPath)
                if isDatabase { databaseNames.insert(name) }
                result.items.append(
                    StoreItem(
                        relativePath: childRelative, absolutePath: childPath, kind: isDatabase ? .database : .file,
                        permissions: permissions, modificationTime: mtime, size: Int64(info.st_size), linkTarget: nil))
            case S_IFLNK:
                let target = linkTarget(childPath)
                result.items.append(
                    StoreItem(
                        relativePath: childRelative, absolutePath: childPath, kind: .symlink,
                        permissions: permissions, modificationTime: mtime, size: Int64(EscapedName.bytes(target).count), linkTarget: target)
                )
            case S_IFIFO:
                // Recreated empty by restore (mkfifo): what matters is that it is there.
                result.items.append(
                    StoreItem(
                        relativePath: childRelative, absolutePath: childPath, kind: .fifo,
                        permissions: permissions, modificationTime: mtime, size: 0, linkTarget: nil))
            case S_IFSOCK:
                result.leftOut.append(childRelative + " (a socket)")
            case S_IFCHR:
                result.leftOut.append(childRelative + " (a character device)")
            case S_IFBLK:
                result.leftOut.append(childRelative + " (a block device)")
            default:
                result.leftOut.append(childRelative + " (not a file, folder, link or FIFO)")
            }
        }
    }
}
