import Foundation

#if canImport(Glibc)
import Glibc
#endif

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

    /// With `sampleCompressibility`, files of at least ``CompressibilitySample/minimumFileSize``
    /// whose header the scan reads are also sampled (``StoreItem/looksIncompressible``), with
    /// the same open: `create` needs the verdict for every file it deflates.
    static func scan(storesDirectory root: String, sampleCompressibility: Bool = false) throws -> Result {
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
        let escapedRoot = EscapedName.escapedRoot(root)
        try walk(
            root: escapedRoot, relative: "", paths: StorePaths(root: escapedRoot), sample: sampleCompressibility,
            into: &result)
        // Kept until the archive is closed: without the room its growth by doubling left.
        result.items = result.items.withUnsafeBufferPointer { Array($0) }
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

    /// What `lstat` (and, for a regular file, the SQLite header) said about one name.
    private struct Inspected {
        var mode: mode_t = 0
        var size: Int64 = 0
        var modificationTime: Int64 = 0
        /// The `lstat` failure's errno, or 0.
        var failure: Int32 = 0
        /// Whether the header says SQLite; nil when not read (a possible companion, or a
        /// file too small to be a database).
        var isDatabase: Bool?
        /// The compressibility sample's verdict, when one was taken.
        var looksIncompressible: Bool?
    }

    /// Each name's slot in a folder's results, written by one thread each.
    private final class Slots: @unchecked Sendable {
        let base: UnsafeMutablePointer<Inspected>
        init(_ base: UnsafeMutablePointer<Inspected>) { self.base = base }
    }

    /// A folder with fewer names is inspected on the calling thread: starting threads
    /// costs more than its `lstat` calls.
    static let namesPerInspectingThread = 512

    /// `lstat` of every name, and the header of every regular file that may be a database
    /// and cannot be a database's companion (those wait for their database's answer, in
    /// ``walk(root:relative:into:)``). A large folder (an app's thousands of attachments)
    /// is inspected on every core, in contiguous ranges.
    private static func inspect(_ names: [String], in directory: String, sample: Bool) -> [Inspected] {
        var results = [Inspected](repeating: Inspected(), count: names.count)
        let width = min(WorkerPool.cores, names.count / namesPerInspectingThread)
        guard width > 1 else {
            withSampleBuffer(sample) { buffer in
                for index in names.indices { results[index] = inspect(name: names[index], in: directory, sampleBuffer: buffer) }
            }
            return results
        }
        results.withUnsafeMutableBufferPointer { buffer in
            let slots = Slots(buffer.baseAddress!)
            let count = names.count
            WorkerPool.start(name: "storebackup-scan", width: width) { worker in
                withSampleBuffer(sample) { buffer in
                    for index in (count * worker / width)..<(count * (worker + 1) / width) {
                        slots.base[index] = inspect(name: names[index], in: directory, sampleBuffer: buffer)
                    }
                }
            }.join()
        }
        return results
    }

    private static func withSampleBuffer(_ wanted: Bool, _ body: (UnsafeMutableRawBufferPointer?) -> Void) {
        guard wanted else { return body(nil) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: CompressibilitySample.size, alignment: 16)
        defer { buffer.deallocate() }
        body(buffer)
    }

    private static func inspect(name: String, in directory: String, sampleBuffer: UnsafeMutableRawBufferPointer?) -> Inspected {
        var info = stat()
        let path = directory + "/" + name
        guard EscapedName.withSystemPath(path, { lstat($0, &info) }) == 0 else { return Inspected(failure: errno) }
        var result = Inspected(mode: info.st_mode, size: Int64(info.st_size), modificationTime: Int64(info.st_mtim.tv_sec))
        guard info.st_mode & S_IFMT == S_IFREG && info.st_size >= 512 && !companionSuffixes.contains(where: { name.hasSuffix($0) })
        else { return result }
        guard result.size % SQLiteHeader.smallestPageSize == 0 else {
            // SQLite writes whole pages of 512 bytes or a multiple of it, so this size is not
            // a database's: the sample needs no open through SQLite's VFS (which takes one
            // global lock that every scanning thread would queue on).
            result.isDatabase = false
            if let sampleBuffer, result.size >= CompressibilitySample.minimumFileSize {
                result.looksIncompressible = CompressibilitySample.looksIncompressible(
                    path: path, size: result.size, sample: sampleBuffer)
            }
            return result
        }
        guard let sampleBuffer, result.size >= CompressibilitySample.minimumFileSize else {
            result.isDatabase = SQLiteHeader.isDatabase(path: path)
            return result
        }
        let range = CompressibilitySample.range(fileSize: result.size)
        let header = SQLiteHeader.read(path: path, sample: sampleBuffer, at: range.offset)
        result.isDatabase = header.isDatabase
        if header.sampleRead && !header.isDatabase {
            result.looksIncompressible = CompressibilitySample.looksIncompressible(
                UnsafeRawBufferPointer(rebasing: sampleBuffer[0..<range.count]))
        }
        return result
    }

    /// Whether `name` is `X-wal`, `X-shm` or `X-journal` for one of the folder's `databases`.
    private static func isCompanion(_ name: String, of databases: Set<String>) -> Bool {
        companionSuffixes.contains { name.hasSuffix($0) && databases.contains(String(name.dropLast($0.count))) }
    }

    private static func walk(
        root: String, relative: String, paths: StorePaths, sample: Bool, into result: inout Result
    ) throws {
        let directory = relative.isEmpty ? root : root + "/" + relative
        // Sorted by bytes (the escaped form sorts as its bytes do for ASCII), so a name
        // sorts before its companions'.
        let names = try names(in: directory).sorted()
        let inspected = inspect(names, in: directory, sample: sample)

        // Databases of this folder found so far.
        var databaseNames = Set<String>()
        for (name, info) in zip(names, inspected) {
            let childRelative = relative.isEmpty ? name : relative + "/" + name
            let childPath = root + "/" + childRelative
            guard info.failure == 0 else {
                // SQLite deletes a rollback journal at the end of every write transaction, so
                // an app's journal may be gone since the folder was read; it would be left
                // out anyway (below).
                if info.failure == ENOENT && isCompanion(name, of: databaseNames) { continue }
                throw StoreBackupError.io(path: childPath, operation: "stat", errno: info.failure)
            }
            let permissions = UInt32(info.mode) & 0o7777
            let mtime = info.modificationTime
            switch info.mode & S_IFMT {
            case S_IFDIR:
                result.items.append(
                    StoreItem(
                        in: paths, relativePath: childRelative, kind: .directory,
                        permissions: permissions, modificationTime: mtime, size: 0, linkTarget: nil))
                try walk(root: root, relative: childRelative, paths: paths, sample: sample, into: &result)
            case S_IFREG:
                // A database's companions are left out, unread: SQLite's VFS keeps a
                // descriptor open only for a database file it has open, so reading the
                // header of an app's `-shm` would drop the app's locks on it.
                if isCompanion(name, of: databaseNames) { continue }
                let isDatabase = info.isDatabase ?? (info.size >= 512 && SQLiteHeader.isDatabase(path: childPath))
                if isDatabase { databaseNames.insert(name) }
                result.items.append(
                    StoreItem(
                        in: paths, relativePath: childRelative, kind: isDatabase ? .database : .file,
                        looksIncompressible: info.looksIncompressible, permissions: permissions, modificationTime: mtime,
                        size: info.size, linkTarget: nil))
            case S_IFLNK:
                let target = linkTarget(childPath)
                result.items.append(
                    StoreItem(
                        in: paths, relativePath: childRelative, kind: .symlink,
                        permissions: permissions, modificationTime: mtime, size: Int64(EscapedName.bytes(target).count), linkTarget: target)
                )
            case S_IFIFO:
                // Recreated empty by restore (mkfifo): what matters is that it is there.
                result.items.append(
                    StoreItem(
                        in: paths, relativePath: childRelative, kind: .fifo,
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
