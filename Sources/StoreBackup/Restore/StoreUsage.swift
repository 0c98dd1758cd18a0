import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A process (other than this one) that has a file of a stores directory open or locked.
public struct StoreUser: Sendable, Equatable, Codable {
    /// The file, relative to the stores directory.
    public var file: String
    /// Its process id; 0 when the holder is outside this process's PID namespace.
    public var pid: Int32
    /// The process's command name (`/proc/PID/comm`).
    public var command: String

    /// An entry; ``StoreUsage/scan(storesDirectory:)`` makes these.
    public init(file: String, pid: Int32, command: String) {
        self.file = file
        self.pid = pid
        self.command = command
    }
}

/// Who has a stores directory open: every other process with a descriptor on one of its
/// files (`/proc/*/fd`) or a lock on one (`/proc/locks`).
///
/// Read without disturbing the app: the store's files are only `lstat`ed, never opened,
/// because closing a descriptor of ours on a database would drop every POSIX lock this
/// process holds on it (SQLite's locks, when the app is this process). Descriptors show
/// idle rollback-journal connections, which hold no lock; locks show holders whose
/// descriptors cannot be read (another user's processes without root, another PID namespace).
public struct StoreUsage: Sendable, Equatable {
    /// The processes found, one entry per process and file, sorted by pid then file.
    public var users: [StoreUser] = []
    /// Why some processes could not be looked at; empty when every process was seen.
    public var blindSpots: [String] = []

    /// Nothing else has the store open, as far as could be seen.
    public var isUnused: Bool { users.isEmpty }

    /// Looks at every process for `storesDirectory`'s files. A store that does not exist is unused.
    public static func scan(storesDirectory: String) -> StoreUsage {
        let root = FileSystem.absolutePath(storesDirectory)
        let files = StoreFiles(root: root)
        guard !files.byIdentity.isEmpty else { return StoreUsage() }
        var usage = StoreUsage()
        var found = Set<String>()
        func add(_ user: StoreUser) {
            if found.insert("\(user.pid)/\(user.file)").inserted { usage.users.append(user) }
        }
        let own = getpid()
        var unreadable: [Int32] = []
        for pid in ProcessTable.pids() where pid != own {
            switch ProcessTable.openFiles(of: pid) {
            case .denied: unreadable.append(pid)
            case .gone: continue
            case .links(let links):
                for link in links {
                    guard let file = files.match(link) else { continue }
                    add(StoreUser(file: file, pid: pid, command: ProcessTable.command(of: pid)))
                }
            }
        }
        let visible = Set(ProcessTable.pids())
        for lock in FileLocks.read() {
            guard lock.pid != own, let file = files.byIdentity[FileIdentity(major: lock.major, minor: lock.minor, inode: lock.inode)] else {
                continue
            }
            if lock.pid > 0 && visible.contains(lock.pid) {
                // Seen through its descriptors already, unless those could not be read.
                add(StoreUser(file: file, pid: lock.pid, command: ProcessTable.command(of: lock.pid)))
            } else if lock.pid == -1 {
                // An open-file-description lock names no process; its holder's descriptor
                // shows it, unless that process could not be looked at.
                if !usage.users.contains(where: { $0.file == file }) && !unreadable.isEmpty {
                    usage.blindSpots.append("\(file) is locked (an OFD lock) by a process whose open files cannot be read")
                }
            } else {
                add(StoreUser(file: file, pid: 0, command: "a process in another PID namespace"))
                usage.blindSpots.append("\(file) is locked by a process outside this PID namespace")
            }
        }
        if !unreadable.isEmpty {
            let shown = unreadable.prefix(5).map { "\($0) (\(ProcessTable.command(of: $0)))" }.joined(separator: ", ")
            let more = unreadable.count > 5 ? " and \(unreadable.count - 5) more" : ""
            usage.blindSpots.append(
                "the open files of \(unreadable.count) processes of other users cannot be read without root: \(shown)\(more)")
        }
        usage.users.sort { ($0.pid, $0.file) < ($1.pid, $1.file) }
        return usage
    }

    /// One line naming the processes, e.g. `App.sqlite is open in process 4242 (myapp)`
    /// (`is still open` with `still`): one file per process (databases before their
    /// `-wal`/`-shm`), at most three processes.
    public func describeUsers(still: Bool = false) -> String {
        var byProcess: [(pid: Int32, user: StoreUser)] = []
        // Name a file before the store's folder itself ("."): a writer that syncs the folder
        // after a commit holds it open for a moment, but its database is what matters.
        let rank = { (user: StoreUser) in (user.file == "." ? 1 : 0, user.file.count, user.file) }
        for user in users.sorted(by: { rank($0) < rank($1) })
        where !byProcess.contains(where: { $0.pid == user.pid && user.pid != 0 }) {
            byProcess.append((user.pid, user))
        }
        byProcess.sort { $0.pid < $1.pid }
        let parts = byProcess.prefix(3).enumerated().map { index, entry in
            let holder = entry.pid == 0 ? entry.user.command : "process \(entry.pid) (\(entry.user.command))"
            return index == 0 ? "\(entry.user.file) is \(still ? "still " : "")open in \(holder)" : "\(entry.user.file) in \(holder)"
        }
        var text = parts.joined(separator: ", ")
        if byProcess.count > 3 { text += " and \(byProcess.count - 3) more processes" }
        return text
    }
}

/// A file's identity as `/proc/locks` writes it.
struct FileIdentity: Hashable {
    var major: UInt64
    var minor: UInt64
    var inode: UInt64

    init(major: UInt64, minor: UInt64, inode: UInt64) {
        self.major = major; self.minor = minor; self.inode = inode
    }

    /// From `st_dev`/`st_ino` (glibc's encoding of the device number).
    init(device: UInt64, inode: UInt64) {
        major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        self.inode = inode
    }
}

/// The store's files by identity and by path, for matching descriptors and locks.
private struct StoreFiles {
    let root: String
    /// The root as the kernel spells it in `/proc/PID/fd` links (symbolic links resolved).
    let resolvedRoot: String
    var byIdentity: [FileIdentity: String] = [:]

    init(root: String) {
        self.root = root
        resolvedRoot =
            realpath(root, nil).map { pointer in
                defer { free(pointer) }
                return String(cString: pointer)
            } ?? root
        guard let info = try? FileSystem.lstatInfo(root), info.st_mode & S_IFMT == S_IFDIR else { return }
        byIdentity[FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))] = "."
        guard let walker = FileManager.default.enumerator(atPath: root) else { return }
        for case let relative as String in walker {
            guard let entry = try? FileSystem.lstatInfo(root + "/" + relative) else { continue }
            byIdentity[FileIdentity(device: UInt64(entry.st_dev), inode: UInt64(entry.st_ino))] = relative
        }
    }

    /// The store-relative path of an open descriptor, or nil when it is not the store's.
    func match(_ link: ProcessTable.OpenFile) -> String? {
        for prefix in [root, resolvedRoot] where link.path.hasPrefix(prefix + "/") {
            var relative = String(link.path.dropFirst(prefix.count + 1))
            if relative.hasSuffix(" (deleted)") { return nil }
            if relative.isEmpty { relative = "." }
            return relative
        }
        // Reached through another path (a bind mount, a hard link): same file all the same.
        guard let identity = link.identity else { return nil }
        return byIdentity[identity]
    }
}

/// `/proc`: the processes and their open files.
enum ProcessTable {
    struct OpenFile {
        var path: String
        var identity: FileIdentity?
    }

    enum Descriptors {
        case links([OpenFile])
        /// Another user's process, and we are not root.
        case denied
        /// The process ended while it was looked at.
        case gone
    }

    static func pids() -> [Int32] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return names.compactMap { Int32($0) }
    }

    /// Every descriptor of `pid` that names a file (not a socket, pipe or anonymous inode).
    static func openFiles(of pid: Int32) -> Descriptors {
        let folder = "/proc/\(pid)/fd"
        guard let directory = opendir(folder) else {
            guard errno == EACCES || errno == EPERM else { return .gone }
            // A kernel thread has no files (and no executable): nothing to hide.
            return isKernelThread(pid) ? .gone : .denied
        }
        defer { closedir(directory) }
        var files: [OpenFile] = []
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            guard name.first?.isNumber == true else { continue }
            let linkPath = folder + "/" + name
            let count = readlink(linkPath, &buffer, buffer.count - 1)
            guard count > 0, buffer[0] == CChar(UInt8(ascii: "/")) else { continue }
            let path = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            var info = stat()
            // stat through /proc's link reaches the file itself, without opening it.
            let identity = stat(linkPath, &info) == 0 ? FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)) : nil
            files.append(OpenFile(path: path, identity: identity))
        }
        return .links(files)
    }

    /// Kernel threads (PF_KTHREAD in `/proc/PID/stat`'s flags, readable by anyone) have no files.
    static func isKernelThread(_ pid: Int32) -> Bool {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return false }
        let text = String(decoding: data, as: UTF8.self)
        // The command name (in parentheses) may hold spaces: count fields after its end.
        guard let close = text.lastIndex(of: ")") else { return false }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 6, let flags = UInt64(fields[6]) else { return false }
        return flags & 0x0020_0000 != 0
    }

    /// `/proc/PID/comm`, or `?` once the process has gone.
    static func command(of pid: Int32) -> String {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/comm") else { return "?" }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// `/proc/locks`: every file lock on the machine, with its holder's pid as this PID
/// namespace sees it (0 when the holder is outside it, -1 for an OFD lock).
enum FileLocks {
    struct Lock {
        var pid: Int32
        var major: UInt64
        var minor: UInt64
        var inode: UInt64
    }

    static func read(path: String = "/proc/locks") -> [Lock] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap(parse)
    }

    /// `1: POSIX  ADVISORY  READ 4242 08:01:131090 128 128`; a waiting request (`->`) holds nothing.
    static func parse(_ line: Substring) -> Lock? {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 6, fields[1] != "->" else { return nil }
        let identity = fields[5].split(separator: ":")
        guard let pid = Int32(fields[4]), identity.count == 3,
            let major = UInt64(identity[0], radix: 16), let minor = UInt64(identity[1], radix: 16),
            let inode = UInt64(identity[2])
        else { return nil }
        return Lock(pid: pid, major: major, minor: minor, inode: inode)
    }
}
