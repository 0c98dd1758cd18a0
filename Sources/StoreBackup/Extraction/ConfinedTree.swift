import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A folder that restore writes into through a directory descriptor, never by path.
///
/// Every path is walked one component at a time from the root's descriptor with
/// `O_NOFOLLOW`, so no link (whether in the archive, left by an earlier run or planted by
/// someone else while restore runs) can take a write outside the folder. Files are
/// created with `O_EXCL`: nothing that exists is ever opened for writing. Links are made
/// only by ``createLink(_:target:modificationTime:)``, which the extractor calls last.
/// Relative paths and link targets are in ``EscapedName``'s form; each component is
/// turned back into its raw bytes for the system call.
final class ConfinedTree: Sendable {
    /// The folder's path, for messages.
    let root: String
    private let rootDescriptor: Int32
    /// The folders walked to so far, so that the next file of a folder skips the walk.
    private let openFolders = OpenFolders()

    /// Creates `root` (which must not exist; its parent is trusted) and opens it.
    init(creating root: String) throws {
        self.root = root
        guard mkdir(root, 0o700) == 0 else { throw StoreBackupError.io(path: root, operation: "create", errno: errno) }
        rootDescriptor = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard rootDescriptor >= 0 else { throw StoreBackupError.io(path: root, operation: "open", errno: errno) }
    }

    /// Opens `root`, an existing folder this process made (an incremental backup is applied
    /// onto the tree its base left there).
    init(opening root: String) throws {
        self.root = root
        rootDescriptor = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard rootDescriptor >= 0 else { throw StoreBackupError.io(path: root, operation: "open", errno: errno) }
    }

    deinit { close(rootDescriptor) }

    /// Removes `relative` (a file, link, FIFO, or a folder with everything beneath it),
    /// walking from the root without following links; nothing there is no error.
    func remove(_ relative: String) throws {
        let opened = try openParent(relative, create: false)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        openFolders.forget(under: relative)
        try Self.removeEntry(leaf, in: parent, path: root + "/" + relative)
    }

    private static func removeEntry(_ leaf: String, in parent: Int32, path: String) throws {
        if EscapedName.withSystemPath(leaf, { unlinkat(parent, $0, 0) }) == 0 || errno == ENOENT { return }
        guard errno == EISDIR else { throw StoreBackupError.io(path: path, operation: "remove", errno: errno) }
        let folder = EscapedName.withSystemPath(leaf) { openat(parent, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard folder >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        // fdopendir owns the descriptor from here; closedir closes it.
        guard let listing = fdopendir(folder) else {
            close(folder)
            throw StoreBackupError.io(path: path, operation: "list", errno: errno)
        }
        var names: [[UInt8]] = []
        while let item = readdir(listing) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            if name != [UInt8(ascii: ".")] && name != [UInt8(ascii: "."), UInt8(ascii: ".")] { names.append(name) }
        }
        defer { closedir(listing) }
        for name in names {
            let escaped = EscapedName.escape(name)
            try removeEntry(escaped, in: dirfd(listing), path: path + "/" + escaped)
        }
        guard EscapedName.withSystemPath(leaf, { unlinkat(parent, $0, AT_REMOVEDIR) }) == 0 else {
            throw StoreBackupError.io(path: path, operation: "remove", errno: errno)
        }
    }

    /// Opens the regular file `relative` for reading and writing (it must not be a link):
    /// a database patched by a page delta.
    func openFileForPatching(_ relative: String) throws -> Int32 {
        let opened = try openParent(relative, create: false)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        let fd = EscapedName.withSystemPath(leaf) { openat(parent, $0, O_RDWR | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw StoreBackupError.io(path: root + "/" + relative, operation: "open", errno: errno) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw StoreBackupError.io(path: root + "/" + relative, operation: "open (not a regular file)", errno: EINVAL)
        }
        return fd
    }

    /// Sets the mode and time of the regular file `relative` (not following links).
    func setFileAttributes(_ relative: String, permissions: UInt32, modificationTime: Int64) throws {
        let opened = try openParent(relative, create: false)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        let path = root + "/" + relative
        try EscapedName.withSystemPath(leaf) { name in
            // fchmodat follows links: make sure this is the regular file it should be.
            var info = stat()
            guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFREG else {
                throw StoreBackupError.io(path: path, operation: "chmod (not a regular file)", errno: EINVAL)
            }
            guard fchmodat(parent, name, mode_t(permissions), 0) == 0 else {
                throw StoreBackupError.io(path: path, operation: "chmod", errno: errno)
            }
            var times = [timespec(tv_sec: time_t(modificationTime), tv_nsec: 0), timespec(tv_sec: time_t(modificationTime), tv_nsec: 0)]
            guard utimensat(parent, name, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw StoreBackupError.io(path: path, operation: "set time", errno: errno)
            }
        }
    }

    /// Creates the folder `relative` and any missing parents (mode 0700 until attributes
    /// are applied at the end).
    func makeDirectories(_ relative: String) throws {
        let descriptor = try openDirectory(components(relative), create: true, for: relative)
        if descriptor != rootDescriptor { close(descriptor) }
    }

    /// Creates the regular file `relative` (O_EXCL) and returns its descriptor, open for writing
    /// (and, with `readBack`, for reading what was written).
    func createFile(_ relative: String, readBack: Bool = false) throws -> Int32 {
        let opened = try openParent(relative, create: true)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        let fd = EscapedName.withSystemPath(leaf) {
            openat(parent, $0, (readBack ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        }
        guard fd >= 0 else { throw StoreBackupError.io(path: root + "/" + relative, operation: "create", errno: errno) }
        return fd
    }

    /// Creates the link `relative` pointing at `target` (already checked to stay inside).
    func createLink(_ relative: String, target: String, modificationTime: Int64) throws {
        let opened = try openParent(relative, create: true)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        let made = EscapedName.withSystemPath(target) { target in EscapedName.withSystemPath(leaf) { symlinkat(target, parent, $0) } }
        guard made == 0 else {
            throw StoreBackupError.io(path: root + "/" + relative, operation: "create link", errno: errno)
        }
        var times = [timespec(tv_sec: time_t(modificationTime), tv_nsec: 0), timespec(tv_sec: time_t(modificationTime), tv_nsec: 0)]
        _ = EscapedName.withSystemPath(leaf) { utimensat(parent, $0, &times, AT_SYMLINK_NOFOLLOW) }
    }

    /// Creates the FIFO `relative` with its mode and time. Nothing opens it (opening a FIFO
    /// waits for the other end): mode and time are set by name, not following links.
    func createFIFO(_ relative: String, permissions: UInt32, modificationTime: Int64) throws {
        let opened = try openParent(relative, create: true)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        let path = root + "/" + relative
        try EscapedName.withSystemPath(leaf) { name in
            guard mkfifoat(parent, name, 0o600) == 0 else { throw StoreBackupError.io(path: path, operation: "create FIFO", errno: errno) }
            guard fchmodat(parent, name, mode_t(permissions), 0) == 0 else {
                throw StoreBackupError.io(path: path, operation: "chmod", errno: errno)
            }
            var times = [timespec(tv_sec: time_t(modificationTime), tv_nsec: 0), timespec(tv_sec: time_t(modificationTime), tv_nsec: 0)]
            guard utimensat(parent, name, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw StoreBackupError.io(path: path, operation: "set time", errno: errno)
            }
        }
    }

    /// Sets a folder's mode and time (`relative` nil: the root itself).
    func setDirectoryAttributes(_ relative: String?, permissions: UInt32, modificationTime: Int64) throws {
        let descriptor = try relative.map { try openDirectory(components($0), create: false, for: $0) } ?? rootDescriptor
        defer { if descriptor != rootDescriptor { close(descriptor) } }
        let path = root + (relative.map { "/" + $0 } ?? "")
        guard fchmod(descriptor, mode_t(permissions)) == 0 else { throw StoreBackupError.io(path: path, operation: "chmod", errno: errno) }
        var times = [timespec(tv_sec: time_t(modificationTime), tv_nsec: 0), timespec(tv_sec: time_t(modificationTime), tv_nsec: 0)]
        guard futimens(descriptor, &times) == 0 else { throw StoreBackupError.io(path: path, operation: "set time", errno: errno) }
    }

    /// Opens the regular file `relative` for reading (it must not be a link). Non-blocking, so
    /// that a FIFO found there (a tree made by someone else) does not wait for a writer.
    func openFileForReading(_ relative: String) throws -> Int32 {
        let opened = try openParent(relative, create: false)
        defer { release(opened) }
        let (parent, leaf) = (opened.descriptor, opened.leaf)
        let fd = EscapedName.withSystemPath(leaf) { openat(parent, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard fd >= 0 else { throw StoreBackupError.io(path: root + "/" + relative, operation: "open", errno: errno) }
        return fd
    }

    private func components(_ relative: String) -> [String] {
        relative.split(separator: "/").map(String.init)
    }

    /// A file's folder, open, and the file's name in it.
    private struct Parent {
        let descriptor: Int32
        let leaf: String
        /// The folder's path when ``openFolders`` lent the descriptor; nil when the caller
        /// owns it (or it is the root's).
        let keptAs: String?
    }

    private func openParent(_ relative: String, create: Bool) throws -> Parent {
        var parts = components(relative)
        guard let leaf = parts.popLast(), leaf != ".", leaf != ".." else {
            throw StoreBackupError.io(path: root + "/" + relative, operation: "create", errno: EINVAL)
        }
        guard !parts.isEmpty else { return Parent(descriptor: rootDescriptor, leaf: leaf, keptAs: nil) }
        let folder = parts.joined(separator: "/")
        if let kept = openFolders.borrow(folder) { return Parent(descriptor: kept, leaf: leaf, keptAs: folder) }
        let descriptor = try openDirectory(parts, create: create, for: relative)
        return Parent(descriptor: descriptor, leaf: leaf, keptAs: openFolders.keep(descriptor, path: folder) ? folder : nil)
    }

    private func release(_ parent: Parent) {
        if let folder = parent.keptAs {
            openFolders.giveBack(parent.descriptor, path: folder)
        } else if parent.descriptor != rootDescriptor {
            close(parent.descriptor)
        }
    }

    /// Walks `parts` from the root, each step `O_NOFOLLOW | O_DIRECTORY`: a link or a
    /// file where a folder should be fails (ELOOP/ENOTDIR) instead of being followed.
    private func openDirectory(_ parts: [String], create: Bool, for relative: String) throws -> Int32 {
        var current = rootDescriptor
        for part in parts {
            guard part != ".", part != ".." else {
                if current != rootDescriptor { close(current) }
                throw StoreBackupError.io(path: root + "/" + relative, operation: "open", errno: EINVAL)
            }
            if create && EscapedName.withSystemPath(part, { mkdirat(current, $0, 0o700) }) != 0 && errno != EEXIST {
                let code = errno
                if current != rootDescriptor { close(current) }
                throw StoreBackupError.io(path: root + "/" + relative, operation: "create", errno: code)
            }
            let next = EscapedName.withSystemPath(part) { openat(current, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            let code = errno
            if current != rootDescriptor { close(current) }
            guard next >= 0 else { throw StoreBackupError.io(path: root + "/" + relative, operation: "open", errno: code) }
            current = next
        }
        return current
    }
}
