import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The file side of a diff: what each side holds, from a backup's manifest or a scan of the
/// live stores directory, and the files added, removed and changed between them.
enum DiffFiles {
    struct Entry {
        var type: String
        var size: Int64
        var sha256: String?
        var linkTarget: String?
    }

    /// One side: files (not databases, not folders) by path, and the databases' paths with
    /// the SHA-256 a manifest records (nil for a live database: it is compared by rows).
    struct Side {
        var files: [String: Entry] = [:]
        var databases: [String: String?] = [:]
    }

    /// A backup's side, from its manifest.
    static func backup(_ contents: BackupContents) -> Side {
        var side = Side()
        for entry in contents.entries {
            switch entry.type {
            case "directory": continue
            case "database": side.databases[entry.path] = entry.sha256
            default:
                side.files[entry.path] = Entry(
                    type: entry.type, size: entry.size, sha256: entry.sha256, linkTarget: entry.linkTarget)
            }
        }
        return side
    }

    /// The live stores directory's side, scanned as `create` scans it. A file is hashed
    /// (SHA-256) only when the older side has one of the same size at its path: a different
    /// size already says it changed.
    static func live(_ root: String, comparedWith older: Side) throws -> Side {
        var side = Side()
        for item in try StoreScanner.scan(storesDirectory: root).items {
            let path = item.relativePath
            // Our own temporaries (a create or extract running beside the store) are no content.
            if ScratchFiles.owner(of: String(path.split(separator: "/").last ?? "")) != nil { continue }
            switch item.kind {
            case .directory: continue
            case .database: side.databases[path] = String?.none
            case .symlink: side.files[path] = Entry(type: "symlink", size: item.size, linkTarget: item.linkTarget)
            case .fifo: side.files[path] = Entry(type: "fifo", size: 0)
            case .file:
                var entry = Entry(type: "file", size: item.size)
                if let before = older.files[path], before.type == "file", before.size == item.size, before.sha256 != nil {
                    entry.sha256 = try sha256(item.absolutePath, length: item.size)
                }
                side.files[path] = entry
            }
        }
        return side
    }

    /// Files on one side only, or whose type, size, content or link target differ, by path.
    static func changes(from older: Side, to newer: Side) -> [StoreDiff.FileChange] {
        var changes: [StoreDiff.FileChange] = []
        for path in Set(older.files.keys).union(newer.files.keys).sorted() {
            let before = older.files[path], after = newer.files[path]
            let kind: StoreDiff.FileChange.Kind
            switch (before, after) {
            case (nil, _): kind = .added
            case (_, nil): kind = .removed
            case (let before?, let after?):
                let same =
                    before.type == after.type && before.size == after.size && before.linkTarget == after.linkTarget
                    && before.sha256 == after.sha256
                guard !same else { continue }
                kind = .changed
            }
            changes.append(
                StoreDiff.FileChange(
                    kind: kind, path: path, type: (after ?? before)!.type, sizeBefore: before?.size, sizeAfter: after?.size))
        }
        return changes
    }

    /// Hex SHA-256 of a live file's first `length` bytes; `path` in ``EscapedName``'s form.
    private static func sha256(_ path: String, length: Int64) throws -> String {
        let descriptor = EscapedName.withSystemPath(path) { open($0, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open for hashing", errno: errno) }
        defer { close(descriptor) }
        var hasher = SHA256()
        try FileDigest.read(descriptor: descriptor, path: path, offset: 0, length: length) { _, bytes in
            hasher.update(bufferPointer: bytes)
        }
        return FileDigest.hex(hasher.finalize())
    }
}
