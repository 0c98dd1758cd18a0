import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The live stores directory, as a delta restore reads it for bytes to reuse: regular files
/// only, reached without following links. Whatever is read here is used only once its
/// SHA-256 matches the manifest's, so a file that changes or is not what it seems costs a
/// fetch from the backup, never a wrong byte.
struct LiveStore: Sendable {
    /// The stores directory's path (plain), for messages.
    let path: String
    private let tree: ConfinedTree

    /// Opens the live stores directory; nil, with why, when it cannot be read.
    static func open(_ path: String) -> (store: LiveStore?, failure: String?) {
        do {
            return (LiveStore(path: path, tree: try ConfinedTree(opening: path)), nil)
        } catch {
            return (nil, "the live store cannot be read (\(error))")
        }
    }

    /// `relative` (escaped) as SQLite and messages name it.
    func escapedPath(_ relative: String) -> String { EscapedName.escapedRoot(path) + "/" + relative }

    /// A regular file at `relative`, open for reading, and its size; nil when there is none
    /// (missing, a folder, a link, a FIFO) or it cannot be read.
    func openFile(_ relative: String) -> (descriptor: Int32, size: Int64)? {
        guard let fd = try? tree.openFileForReading(relative) else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            return nil
        }
        return (fd, Int64(info.st_size))
    }

    /// The database at `relative` as one committed state (``LiveDatabase``); nil when there
    /// is nothing there to reuse.
    func openDatabase(_ relative: String, scratchDirectory: String) -> LiveDatabase? {
        let escaped = escapedPath(relative)
        // Through SQLite's own VFS: a descriptor of ours on a database the app holds in this
        // process would drop its locks when closed (SQLiteHeader).
        if SQLiteHeader.isDatabase(path: escaped) {
            guard let snapshot = try? DatabaseSnapshot(path: escaped, relativePath: relative, scratchDirectory: scratchDirectory)
            else { return nil }
            return LiveDatabase(snapshot: snapshot)
        }
        // Not a database (any more): its bytes as they are; there is no committed state to tear.
        guard let file = openFile(relative) else { return nil }
        return LiveDatabase(descriptor: file.descriptor, size: file.size, path: escaped)
    }
}

/// The bytes of a file of the live store where the backup has a database: read through a
/// ``DatabaseSnapshot`` (a read transaction of SQLite's, never a torn state) when it is a
/// database, else the file's bytes.
final class LiveDatabase: Sendable {
    let size: Int64
    private let snapshot: DatabaseSnapshot?
    private let descriptor: Int32
    private let path: String

    init(snapshot: DatabaseSnapshot) {
        self.snapshot = snapshot
        size = snapshot.size
        descriptor = -1
        path = snapshot.path
    }

    /// Takes ownership of `descriptor`.
    init(descriptor: Int32, size: Int64, path: String) {
        snapshot = nil
        self.descriptor = descriptor
        self.size = size
        self.path = path
    }

    deinit {
        snapshot?.finish()
        if descriptor >= 0 { close(descriptor) }
    }

    /// Fills `buffer` from `offset`; false when the file ends first.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Bool {
        guard offset + Int64(buffer.count) <= size else { return false }
        if let snapshot {
            var done = 0
            while done < buffer.count {
                let got = try snapshot.read(into: buffer.baseAddress! + done, count: buffer.count - done, offset: offset + Int64(done))
                if got == 0 { return false }
                done += got
            }
            return true
        }
        return try PositionedRead.fill(descriptor, into: buffer, at: offset, path: path) == buffer.count
    }

    /// Ends the read transaction as soon as the bytes are read (writers and checkpoints go on).
    func finish() { snapshot?.finish() }
}
