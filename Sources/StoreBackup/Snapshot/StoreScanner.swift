import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One thing in the stores directory that goes into the archive.
struct StoreItem: Sendable {
    enum Kind: String, Codable, Sendable { case directory, file, symlink, database }

    /// Path relative to the stores directory, "/"-separated, never starting with "/".
    let relativePath: String
    let absolutePath: String
    let kind: Kind
    /// Permission bits only (no file-type bits).
    let permissions: UInt32
    /// Modification time in whole seconds since 1970, UTC.
    let modificationTime: Int64
    /// Bytes on disk when scanned (for a database, the snapshot's size replaces it).
    let size: Int64
    let linkTarget: String?
}

/// Walks a stores directory: everything, hidden files and empty folders included,
/// without following symbolic links. SQLite files are recognised by their header;
/// their `-wal`, `-shm` and `-journal` companions are left out because the snapshot
/// of each database is already consistent without them.
enum StoreScanner {
    /// The archive folder reserved for storebackup's own manifest.
    static let reservedFolder = ".storebackup"

    /// The files SQLite keeps beside a database `X`: `X-wal`, `X-shm`, `X-journal`.
    static let companionSuffixes = ["-wal", "-shm", "-journal"]

    struct Result: Sendable {
        var items: [StoreItem]
        var skipped: [String]
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
        var result = Result(items: [], skipped: [])
        try walk(root: root, relative: "", into: &result)
        return result
    }

    private static func walk(root: String, relative: String, into result: inout Result) throws {
        let directory = relative.isEmpty ? root : root + "/" + relative
        guard let handle = opendir(directory) else {
            throw StoreBackupError.storesDirectoryUnreadable(path: directory, reason: String(cString: strerror(errno)))
        }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(handle)

        // Databases of this folder found so far: a name sorts before its companions'.
        var databaseNames = Set<String>()
        for name in names.sorted() {
            let childRelative = relative.isEmpty ? name : relative + "/" + name
            let childPath = root + "/" + childRelative
            if relative.isEmpty && name == reservedFolder {
                result.skipped.append(childRelative + " (reserved for storebackup's manifest)")
                continue
            }
            let info = try FileSystem.lstatInfo(childPath)
            let permissions = UInt32(info.st_mode) & 0o7777
            let mtime = Int64(info.st_mtim.tv_sec)
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                result.items.append(StoreItem(
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
                result.items.append(StoreItem(
                    relativePath: childRelative, absolutePath: childPath, kind: isDatabase ? .database : .file,
                    permissions: permissions, modificationTime: mtime, size: Int64(info.st_size), linkTarget: nil))
            case S_IFLNK:
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: childPath)) ?? ""
                result.items.append(StoreItem(
                    relativePath: childRelative, absolutePath: childPath, kind: .symlink,
                    permissions: permissions, modificationTime: mtime, size: Int64(target.utf8.count), linkTarget: target))
            default:
                result.skipped.append(childRelative + " (not a regular file, folder or link)")
            }
        }
    }
}
