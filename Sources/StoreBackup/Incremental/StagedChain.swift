import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A chain's full opened while it downloads: the staging file, and how to open it
/// (``ArchiveReader/init(arriving:backupName:passwords:)``) with a password.
struct ArrivingBase: Sendable {
    let path: String
    let open: @Sendable (PasswordProvider?) throws -> ArchiveReader
}

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
/// full, each fetched and opened, and every link checked by ``ChainLinkRule`` before
/// anything is written. A full backup is a chain of one.
struct StagedChain: Sendable {
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
    ///
    /// `streamFull`, when given, may open the chain's full while it is still downloading
    /// (restore's streamed download, ``ArrivingArchive``): it gets the full's listing and the
    /// password the chain was opened with, and returns the arriving archive's path and
    /// opener, or nil to have the full staged as the other links are.
    static func fetch(
        newest: ChainLink, destination: any BackupDestination, passwords: PasswordProvider?,
        stage: @Sendable (String) async throws -> (path: String, downloaded: Bool),
        streamFull: (@Sendable (BackupListing) async throws -> ArrivingBase?)? = nil
    ) async throws -> StagedChain {
        guard let manifest = newest.manifest, manifest.isIncremental else { return StagedChain(links: [newest]) }
        var fetched: [ChainLink] = []
        do {
            let listed = try await destination.sortedBackups()
            let available = Set(listed.map(\.name))
            let openedAhead = await openAhead(from: newest, among: listed.map(\.name), destination: destination)
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
                var arriving: ArrivingBase?
                if !BackupName.isIncremental(base.name), let streamFull, let listing = listed.first(where: { $0.name == base.name }) {
                    arriving = try await streamFull(listing)
                }
                let staged: (path: String, downloaded: Bool)
                if let arriving { staged = (arriving.path, true) } else { staged = try await stage(base.name) }
                let reader: ArchiveReader
                if let ahead = openedAhead[base.name], ahead.path == staged.path, !staged.downloaded {
                    reader = ahead.reader
                } else {
                    reader = try await openStaged(base.name, staged: staged, arriving: arriving, opened: newest, passwords: passwords)
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
        return StagedChain(links: fetched.reversed() + [newest])
    }

    /// Opens a staged base (its download removed if it does not open).
    private static func openStaged(
        _ name: String, staged: (path: String, downloaded: Bool), arriving: ArrivingBase?, opened newest: ChainLink,
        passwords: PasswordProvider?
    ) async throws -> ArchiveReader {
        do {
            let path = staged.path
            return try await openBase(name: name, opened: newest.reader, passwords: passwords) { passwords in
                if let arriving { return try arriving.open(passwords) }
                return try ArchiveReader(path: path, backupName: name, passwords: passwords)
            }
        } catch {
            if staged.downloaded { unlink(staged.path) }
            throw error
        }
    }

    /// Opens a base with the password of the chain's newest backup, then (when it does not
    /// fit, or the newest had none) with `passwords`.
    private static func openBase(
        name: String, opened newest: ArchiveReader, passwords: PasswordProvider?,
        open: @escaping @Sendable (PasswordProvider?) throws -> ArchiveReader
    ) async throws -> ArchiveReader {
        try await runBlocking(name: "storebackup-chain") { _ in
            guard let known = newest.password else { return try open(passwords) }
            do {
                return try open(.fixed(known))
            } catch StoreBackupError.wrongPassword {
                return try open(passwords)
            }
        }
    }

    /// ``fetch(newest:destination:passwords:stage:)`` for verify, ls and extract: a base is read in
    /// place when the destination keeps it on this machine, else downloaded into `folder`
    /// under the scratch policy (``removeDownloads()`` removes it; a sweep, if killed).
    static func fetch(
        newest: ChainLink, destination: any BackupDestination, passwords: PasswordProvider?,
        downloadingInto folder: String, progress: ProgressHandler?
    ) async throws -> StagedChain {
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
        guard let manifest = incremental.manifest, manifest.base != nil else { return }
        guard let baseManifest = base.manifest, let baseSHA256 = base.reader.manifestSHA256 else {
            throw StoreBackupError.brokenChain(name: incremental.name, reason: "its base \"\(base.name)\" has no manifest")
        }
        try ChainLinkRule.check(
            manifest, named: incremental.name, hasPageDelta: { incremental.reader.pageDeltas[$0] != nil }, base: base.name,
            baseManifest: baseManifest, baseManifestSHA256: baseSHA256)
    }

    /// Files and databases are both regular files on disk.
    static func isRegular(_ type: String) -> Bool { ChainLinkRule.isRegular(type) }
}
