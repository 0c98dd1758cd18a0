import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Small POSIX helpers the rest of the library shares. They throw `StoreBackupError.io`
/// with the errno so messages say exactly what failed and where.
enum FileSystem {
    static func fileExists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    static func lstatInfo(_ path: String) throws -> stat {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw StoreBackupError.io(path: path, operation: "stat", errno: errno) }
        return info
    }

    /// Flushes a file or directory to stable storage; `droppingCache` then drops its pages
    /// from the page cache (for files read rarely, such as a published backup).
    static func fsync(path: String, droppingCache: Bool = false) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        defer { close(fd) }
        guard Glibc.fsync(fd) == 0 else { throw StoreBackupError.io(path: path, operation: "fsync", errno: errno) }
        // Every page is clean now, so the advice drops all of them (it never drops a dirty one).
        if droppingCache { _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) }
    }

    /// Renames without ever replacing an existing target (renameat2 RENAME_NOREPLACE),
    /// so publishing a backup can never overwrite another one.
    static func renameNoReplace(from source: String, to target: String) throws {
        let result = sb_rename_noreplace(source, target)
        if result == 0 { return }
        let code = errno
        if code == EINVAL || code == ENOSYS {
            // Filesystems without renameat2 flags: link() also refuses an existing target.
            guard link(source, target) == 0 else { throw StoreBackupError.io(path: target, operation: "link", errno: errno) }
            unlink(source)
            return
        }
        throw StoreBackupError.io(path: target, operation: "rename", errno: code)
    }

    static func rename(from source: String, to target: String) throws {
        guard Glibc.rename(source, target) == 0 else {
            throw StoreBackupError.io(path: source, operation: "rename to \(target)", errno: errno)
        }
    }

    static func createDirectories(_ path: String, mode: mode_t = 0o755) throws {
        // A file on the way is the user's mistake, not an I/O error: say which one it is.
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += (prefix.isEmpty && !path.hasPrefix("/") ? "" : "/") + component
            var info = stat()
            guard stat(prefix, &info) == 0 else { break }
            if info.st_mode & S_IFMT != S_IFDIR { throw StoreBackupError.notAFolder(path: prefix, what: describe(info)) }
        }
        do {
            try FileManager.default.createDirectory(
                atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: Int(mode)])
        } catch {
            throw StoreBackupError.io(path: path, operation: "create directory", errno: errno == 0 ? EIO : errno)
        }
    }

    /// What a file system object is, for a message: "a file", "a FIFO"...
    static func describe(_ info: stat) -> String {
        switch info.st_mode & S_IFMT {
        case S_IFREG: return "a file"
        case S_IFDIR: return "a folder"
        case S_IFLNK: return "a link"
        case S_IFIFO: return "a FIFO"
        case S_IFSOCK: return "a socket"
        default: return "a device"
        }
    }

    static func removeTree(_ path: String) throws {
        guard fileExists(path) else { return }
        // Make read-only folders writable first so a restored tree with 0500 folders can go.
        if let enumerator = FileManager.default.enumerator(atPath: path) {
            chmod(path, 0o700)
            for case let relative as String in enumerator {
                let full = path + "/" + relative
                if isDirectory(full), (try? lstatInfo(full)).map({ ($0.st_mode & S_IFMT) == S_IFDIR }) == true {
                    chmod(full, 0o700)
                }
            }
        }
        do { try FileManager.default.removeItem(atPath: path) } catch {
            throw StoreBackupError.io(path: path, operation: "remove", errno: EIO)
        }
    }

    /// Writes all of `bytes` at `offset` (pwrite, retried on EINTR and short writes);
    /// `path` names the file in the error.
    static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let wrote = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + Int64(done)))
            if wrote < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "write", errno: errno)
            }
            done += wrote
        }
    }

    static func parentDirectory(of path: String) -> String {
        (path as NSString).deletingLastPathComponent
    }

    static func lastComponent(of path: String) -> String {
        (path as NSString).lastPathComponent
    }

    /// An absolute, standardized path without a trailing slash.
    static func absolutePath(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        var standardized = (absolute as NSString).standardizingPath
        while standardized.count > 1 && standardized.hasSuffix("/") { standardized.removeLast() }
        return standardized
    }

    /// This machine's name as recorded in manifests: `$STOREBACKUP_HOSTNAME` when set (containers
    /// get random host names; several of them backing up one app should share one), else gethostname.
    static var hostName: String {
        if let name = ProcessInfo.processInfo.environment["STOREBACKUP_HOSTNAME"], !name.isEmpty { return name }
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "unknown" }
        return String(cString: buffer)
    }
}

extension FileSystem {
    /// The bytes held by the files under `path` (sizes, not blocks); links count as 0.
    static func treeSize(_ path: String) -> Int64 {
        guard let info = try? lstatInfo(path) else { return 0 }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { return (info.st_mode & S_IFMT) == S_IFREG ? Int64(info.st_size) : 0 }
        var total: Int64 = 0
        if let enumerator = FileManager.default.enumerator(atPath: path) {
            for case let relative as String in enumerator {
                if let entry = try? lstatInfo(path + "/" + relative), (entry.st_mode & S_IFMT) == S_IFREG { total += Int64(entry.st_size) }
            }
        }
        return total
    }
}
