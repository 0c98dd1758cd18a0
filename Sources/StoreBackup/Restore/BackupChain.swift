import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One backup of a chain, on this machine and opened.
struct ChainLink: Sendable {
    let name: String
    /// The archive file: the destination's own, or a download the chain removes.
    let path: String
    let downloaded: Bool
    let reader: ArchiveReader

    var manifest: Manifest? { reader.manifest }
}

/// A backup and, when it is incremental (format 3), every backup it applies to down to a
/// full, each fetched and opened, and every link checked before anything is written: the
/// SHA-256 of each base's manifest bytes equals what the backup on it recorded, every file
/// it marks as the base's (`"source": "base"`) is the base's at the same path with the same
/// type and SHA-256, and every database it patches (`"pages"`) is one of the base's with
/// the same page size. A full backup is a chain of one.
struct BackupChain: Sendable {
    /// The full first, the backup asked for last.
    let links: [ChainLink]

    /// A chain longer than this is refused: a loop, or not a chain storebackup makes.
    static let maxLength = 1000

    /// The backup asked for.
    var newest: ChainLink { links[links.count - 1] }

    /// Fetches the chain of `newest` (already staged and opened): `stage` brings a backup of
    /// `destination` onto this machine. On any failure the downloads made so far are removed
    /// (not `newest`'s: its caller owns it). An encrypted chain's bases are opened with the
    /// password that opened `newest` (a chain keeps one), and `passwords` is asked only when
    /// that one does not fit: a prompt comes once, not once per backup.
    static func fetch(
        newest: ChainLink, destination: any BackupDestination, passwords: PasswordProvider?,
        stage: @Sendable (String) async throws -> (path: String, downloaded: Bool)
    ) async throws -> BackupChain {
        guard let manifest = newest.manifest, manifest.isIncremental else { return BackupChain(links: [newest]) }
        var fetched: [ChainLink] = []
        do {
            let available = Set(try await destination.sortedBackups().map(\.name))
            var current = newest
            while let manifest = current.manifest, manifest.isIncremental {
                guard let base = manifest.base else {
                    throw StoreBackupError.brokenChain(name: current.name, reason: "its manifest names no base")
                }
                guard fetched.count + 1 < maxLength else {
                    throw StoreBackupError.brokenChain(name: newest.name, reason: "it is more than \(maxLength) backups long")
                }
                guard (try? BackupName.validate(base.name)) != nil else {
                    throw StoreBackupError.brokenChain(name: current.name, reason: "its base \"\(base.name)\" is not a backup's name")
                }
                guard base.name != newest.name, !fetched.contains(where: { $0.name == base.name }) else {
                    throw StoreBackupError.brokenChain(
                        name: current.name, reason: "its base \"\(base.name)\" is already in its chain (the chain loops)")
                }
                guard available.contains(base.name) else {
                    throw StoreBackupError.brokenChain(
                        name: current.name, reason: "its base \"\(base.name)\" is missing from \(destination.displayName)")
                }
                let staged = try await stage(base.name)
                let reader: ArchiveReader
                do { reader = try await openBase(staged.path, name: base.name, opened: newest.reader, passwords: passwords) } catch {
                    if staged.downloaded { unlink(staged.path) }
                    throw error
                }
                let link = ChainLink(name: base.name, path: staged.path, downloaded: staged.downloaded, reader: reader)
                fetched.append(link)
                try check(current, on: link)
                current = link
            }
        } catch {
            for link in fetched where link.downloaded { unlink(link.path) }
            throw error
        }
        return BackupChain(links: fetched.reversed() + [newest])
    }

    /// Opens a base with the password of the chain's newest backup, then (when it does not
    /// fit, or the newest had none) with `passwords`.
    private static func openBase(
        _ path: String, name: String, opened newest: ArchiveReader, passwords: PasswordProvider?
    ) async throws -> ArchiveReader {
        guard let known = newest.password else { return try await open(path, name: name, passwords: passwords) }
        do {
            return try await open(path, name: name, passwords: .fixed(known))
        } catch StoreBackupError.wrongPassword {
            return try await open(path, name: name, passwords: passwords)
        }
    }

    /// ``fetch(newest:destination:passwords:stage:)`` for verify, ls and extract: a base is read in
    /// place when the destination keeps it on this machine, else downloaded into `folder`
    /// under the scratch policy (``removeDownloads()`` removes it; a sweep, if killed).
    static func fetch(
        newest: ChainLink, destination: any BackupDestination, passwords: PasswordProvider?,
        downloadingInto folder: String, progress: ProgressHandler?
    ) async throws -> BackupChain {
        try await fetch(
            newest: newest, destination: destination, passwords: passwords,
            stage: { name in
                if let local = destination.localPath(of: name) { return (local, false) }
                let target = ScratchFiles.path(in: folder, purpose: "download", suffix: ".zip")
                do { try await destination.download(name, to: target, progress: progress) } catch {
                    unlink(target)
                    throw error
                }
                return (target, true)
            })
    }

    /// Opens one archive on a thread of its own (reading its directory and manifest blocks).
    static func open(_ path: String, name: String, passwords: PasswordProvider?) async throws -> ArchiveReader {
        try await runBlocking(name: "storebackup-chain") { _ in try ArchiveReader(path: path, backupName: name, passwords: passwords) }
    }

    /// For each path of the newest backup's tree: the backup whose archive holds its content
    /// (the newest that stored it whole or patched it with a page delta), and whether the
    /// content is rebuilt from page deltas.
    func contentHolders() -> [String: (backup: String, patched: Bool)] {
        var holders: [String: (backup: String, patched: Bool)] = [:]
        for link in links {
            guard let manifest = link.manifest else { continue }
            var next: [String: (backup: String, patched: Bool)] = [:]
            for file in manifest.files {
                switch file.source {
                case "base": next[file.path] = holders[file.path] ?? (link.name, false)
                case "pages": next[file.path] = (link.name, true)
                default: next[file.path] = (link.name, false)
                }
            }
            holders = next
        }
        return holders
    }

    /// Removes the archives downloaded for the chain's bases.
    func removeDownloads() {
        for link in links.dropLast() where link.downloaded { unlink(link.path) }
    }

    /// Whether `incremental` fits onto `base` (see the type's description).
    static func check(_ incremental: ChainLink, on base: ChainLink) throws {
        guard let manifest = incremental.manifest, let expected = manifest.base else { return }
        func broken(_ reason: String) -> StoreBackupError { .brokenChain(name: incremental.name, reason: reason) }
        guard let baseManifest = base.manifest, let baseSHA256 = base.reader.manifestSHA256 else {
            throw broken("its base \"\(base.name)\" has no manifest")
        }
        guard baseSHA256 == expected.manifestSHA256 else {
            throw broken("its base \"\(base.name)\" is not the backup it was made on (the base's manifest has another SHA-256)")
        }
        if let length = manifest.chainLength, let baseLength = baseManifest.chainLength, length != baseLength + 1 {
            throw broken("its chain length \(length) does not follow its base's \(baseLength)")
        }
        var baseFiles: [String: Manifest.File] = [:]
        for file in baseManifest.files { baseFiles[file.path] = file }
        let basePageSizes = Dictionary(baseManifest.databases.map { ($0.path, $0.pageSize) }) { first, _ in first }
        let pageSizes = Dictionary(manifest.databases.map { ($0.path, $0.pageSize) }) { first, _ in first }
        for file in manifest.files {
            switch file.source {
            case "base":
                guard let original = baseFiles[file.path] else {
                    throw broken("\(file.path) is marked as unchanged, but its base \"\(base.name)\" does not hold it")
                }
                guard original.type == file.type, Self.isRegular(file.type), original.sha256 == file.sha256,
                    original.size == file.size, file.sha256 != nil
                else {
                    throw broken("\(file.path) is marked as unchanged, but its base \"\(base.name)\" holds other content there")
                }
            case "pages":
                guard let original = baseFiles[file.path], Self.isRegular(original.type), let oldSize = basePageSizes[file.path] else {
                    throw broken("\(file.path) is patched by pages, but its base \"\(base.name)\" holds no such database")
                }
                guard let pageSize = pageSizes[file.path], pageSize == oldSize else {
                    throw broken(
                        "\(file.path) is patched by pages of \(pageSizes[file.path] ?? 0) bytes, but its base \"\(base.name)\" has pages of \(oldSize)"
                    )
                }
                guard incremental.reader.pageDeltas[file.path] != nil else {
                    throw StoreBackupError.corruptArchive(name: incremental.name, reason: "the page delta of \(file.path) is missing")
                }
            default:
                continue
            }
        }
    }

    /// Files and databases are both regular files on disk.
    static func isRegular(_ type: String) -> Bool { type == "file" || type == "database" }
}
