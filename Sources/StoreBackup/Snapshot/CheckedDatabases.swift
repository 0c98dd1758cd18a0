import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Databases this process has just passed through `PRAGMA integrity_check`, by file
/// identity, so that a check on reload can tell they have not changed since.
///
/// Restore checks every database in full as it unpacks it; the command line's reload then
/// opens the swapped-in store. A rename does not change a file, so a second check of the
/// same bytes (a `quick_check`, reading the whole database again) proves nothing new: reload
/// skips it when the file's identity (device, inode, size, modification and change times,
/// to the nanosecond) is the one recorded right after the check passed. Any write since,
/// by anyone, changes the change time, and then the database is checked again.
enum CheckedDatabases {
    struct Identity: Hashable, Sendable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let modified: Int64
        let modifiedNanoseconds: Int
        let changed: Int64
        let changedNanoseconds: Int
    }

    /// A long-running process restores again and again: the set stays bounded.
    private static let limit = 1024
    private static let checked = Locked<Set<Identity>>([])

    /// Records `path` as checked in full, as it is on disk now.
    static func record(_ path: String) {
        guard let identity = identity(of: path) else { return }
        checked.withLock { set in
            if set.count >= limit { set.removeAll() }
            set.insert(identity)
        }
    }

    /// Whether `path` is, to the nanosecond, a file recorded as checked.
    static func isUnchanged(_ path: String) -> Bool {
        guard let identity = identity(of: path) else { return false }
        return checked.withLock { $0.contains(identity) }
    }

    private static func identity(of path: String) -> Identity? {
        var info = stat()
        guard EscapedName.withSystemPath(path, { lstat($0, &info) }) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return Identity(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
            modified: Int64(info.st_mtim.tv_sec), modifiedNanoseconds: Int(info.st_mtim.tv_nsec),
            changed: Int64(info.st_ctim.tv_sec), changedNanoseconds: Int(info.st_ctim.tv_nsec))
    }
}
