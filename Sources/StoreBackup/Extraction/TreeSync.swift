import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Makes an unpacked store durable before the journal records the swap, so a power cut
/// after a committed restore cannot leave the restored files only in the page cache.
///
/// One `syncfs` of the filesystem holding the tree: far cheaper than fsyncing every file
/// and folder one by one (docs/crash-safety.md), and it needs no descriptor per file, so
/// files and folders restored without read permission are covered too. Where `syncfs` is
/// missing, every file and folder is fsynced instead.
enum TreeSync {
    static func sync(_ root: String) throws {
        let descriptor = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: root, operation: "open", errno: errno) }
        defer { close(descriptor) }
        try sync(root, descriptor: descriptor)
    }

    /// ``sync(_:)`` through `descriptor`, a folder of the tree opened by the caller: `syncfs`
    /// reports the writeback errors since that descriptor was opened.
    static func sync(_ root: String, descriptor: Int32) throws {
        if sb_syncfs(descriptor) == 0 { return }
        guard errno == ENOSYS else { throw StoreBackupError.io(path: root, operation: "syncfs", errno: errno) }
        try fsyncEach(root)
    }

    /// fsyncs every regular file and folder under `root` (folders after their contents).
    static func fsyncEach(_ root: String) throws {
        var folders = [root]
        if let enumerator = FileManager.default.enumerator(atPath: root) {
            for case let relative as String in enumerator {
                let path = root + "/" + relative
                let info = try FileSystem.lstatInfo(path)
                switch info.st_mode & S_IFMT {
                case S_IFDIR: folders.append(path)
                case S_IFREG: try fsyncOpening(path, flags: O_RDONLY, mode: info.st_mode)
                default: continue  // links live in their folder's entries
                }
            }
        }
        for folder in folders.reversed() { try fsyncOpening(folder, flags: O_RDONLY | O_DIRECTORY, mode: 0) }
    }

    /// Opens without following links; a file restored without read permission is made
    /// readable for the moment of the fsync.
    private static func fsyncOpening(_ path: String, flags: Int32, mode: mode_t) throws {
        var descriptor = open(path, flags | O_NOFOLLOW | O_CLOEXEC)
        if descriptor < 0 && errno == EACCES {
            chmod(path, mode | S_IRUSR | (flags & O_DIRECTORY != 0 ? S_IXUSR : 0))
            defer { chmod(path, mode & 0o7777) }
            descriptor = open(path, flags | O_NOFOLLOW | O_CLOEXEC)
        }
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw StoreBackupError.io(path: path, operation: "fsync", errno: errno) }
    }
}
