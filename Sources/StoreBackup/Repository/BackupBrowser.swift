import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Lists a backup's contents and takes files out of it, with no stores directory at all.
///
/// Nothing here touches, locks or recovers a live store: it needs only a destination (and
/// the password of encrypted backups), so it works while a restore holds the store's lock,
/// or on a machine that has no store. ``BackupRepository/contents(of:matching:)`` and
/// ``BackupRepository/extract(_:paths:into:options:progress:)`` are its doors.
struct BackupBrowser: Sendable {
    /// Where the backups are.
    let destination: any BackupDestination
    /// For encrypted backups: asked when one is opened.
    var passwords: PasswordProvider?
    /// What extract may let through (listing a backup without a manifest is always allowed).
    var options = ExtractionOptions()

    /// A browser of the backups in `destination`; `passwords` opens encrypted ones.
    init(destination: any BackupDestination, passwords: PasswordProvider? = nil) {
        self.destination = destination
        self.passwords = passwords
    }

    /// What the backup holds; see ``BackupRepository/contents(of:matching:)``.
    func listContents(_ nameOrLatest: String, matching paths: [String] = []) async throws -> BackupContents {
        let selection = EntrySelection(paths)
        do {
            let backup = try await destination.resolve(nameOrLatest)
            ScratchFiles.sweep(ScratchFiles.temporaryDirectory)
            let passwords = self.passwords
            let destination = self.destination
            return try await withArchive(of: backup, downloadingInto: ScratchFiles.temporaryDirectory, progress: nil) { archive in
                let reader = try await runBlocking(name: "storebackup-ls") { cancel in
                    try archive.reader(backupName: backup.name, passwords: passwords, cancel: cancel)
                }
                // An incremental's manifest lists its whole tree; the chain says where each
                // file's content is (its links are checked as for a restore).
                var holders: [String: (backup: String, patched: Bool)] = [:]
                if reader.manifest?.isIncremental == true {
                    // A chain is read from archive files: an incremental read in ranges is downloaded.
                    guard case .file(let path) = archive else { throw DownloadInstead() }
                    let chain = try await StagedChain.fetch(
                        newest: ChainLink(name: backup.name, path: path, downloaded: false, reader: reader),
                        destination: destination, passwords: passwords, downloadingInto: ScratchFiles.temporaryDirectory,
                        progress: nil)
                    holders = chain.contentHolders()
                    chain.removeDownloads()
                }
                let manifest = reader.manifest
                let archiveEntries = manifest == nil ? reader.entries : []
                // A listing needs only the manifest (or the entry list): libzip's copy of the
                // central directory goes before the listing is built beside them.
                reader.release()
                var entries = Self.contents(manifest: manifest, entries: archiveEntries)
                for index in entries.indices {
                    guard let holder = holders[entries[index].path] else { continue }
                    entries[index].storedIn = holder.backup == backup.name ? nil : holder.backup
                    entries[index].patchedByPages = holder.patched
                }
                try selection.requireMatches(in: entries.lazy.map(\.path), backupName: backup.name)
                if !selection.selectsEverything { entries.removeAll { !selection.contains($0.path) } }
                return BackupContents(
                    backupName: backup.name, hasManifest: manifest != nil, createdAt: manifest?.createdAt,
                    hostName: manifest?.hostName, sourcePath: manifest?.sourcePath, entries: entries)
            }
        } catch is CancellationError {
            throw StoreBackupError.cancelled
        }
    }

    /// Writes the selected entries into a new folder; see ``BackupRepository/extract(_:paths:into:options:progress:)``.
    func extract(
        _ nameOrLatest: String, paths: [String] = [], into directory: String,
        progress: ProgressHandler? = nil
    ) async throws -> ExtractResult {
        let progress = ProgressPlan.stamping(ProgressPlan.verify, progress)
        let selection = EntrySelection(paths)
        let target = FileSystem.absolutePath(directory)
        let parent = FileSystem.parentDirectory(of: target)
        do {
            try Self.checkTarget(target)
            let backup = try await destination.resolve(nameOrLatest)
            // Temporaries of an extract killed earlier, here or in TMPDIR, go first.
            ScratchFiles.sweep(parent)
            let passwords = self.passwords, options = self.options
            let throttle = ProgressThrottle(progress)
            let destination = self.destination
            return try await withArchive(of: backup, downloadingInto: parent, progress: progress) { archive in
                // A local archive is opened once here, to see whether it starts a chain.
                var opened: ArchiveReader? = nil
                if case .file(let path) = archive {
                    let reader = try await StagedChain.open(path, name: backup.name, passwords: passwords)
                    if reader.manifest?.isIncremental == true {
                        let chain = try await StagedChain.fetch(
                            newest: ChainLink(name: backup.name, path: path, downloaded: false, reader: reader),
                            destination: destination, passwords: passwords, downloadingInto: parent, progress: progress)
                        defer { chain.removeDownloads() }
                        return try await Self.extractChain(
                            chain, selection: selection, into: target, options: options, throttle: throttle)
                    }
                    opened = reader
                }
                let local = opened
                return try await runBlocking(name: "storebackup-extract") { cancel in
                    let reader = try local ?? archive.reader(backupName: backup.name, passwords: passwords, cancel: cancel)
                    // A chain is read from archive files: an incremental read in ranges is downloaded.
                    if reader.manifest?.isIncremental == true { throw DownloadInstead() }
                    try selection.requireMatches(in: reader.entries.lazy.map(\.path), backupName: backup.name)
                    try archive.prepareToRead(reader.entries.filter { selection.needs($0.path) }, of: reader)
                    let extraction = SelectiveExtraction(
                        reader: reader, selection: selection, allowed: options, cancel: cancel, progress: throttle)
                    let scratch = ScratchFiles.path(in: parent, purpose: "extract")
                    let databases: [String]
                    do {
                        databases = try extraction.extract(into: scratch)
                        try cancel.throwIfCancelled()
                        // Onto nothing, or onto the empty folder checked above (rename replaces
                        // only an empty one, so anything put there meanwhile makes it fail).
                        try FileSystem.rename(from: scratch, to: target)
                    } catch {
                        try? FileSystem.removeTree(scratch)
                        throw error
                    }
                    try FileSystem.fsync(path: parent)
                    throttle.report(BackupProgress(phase: .done), force: true)
                    let written = reader.entries.filter { selection.needs($0.path) }
                    return ExtractResult(
                        backupName: backup.name, directory: target, entryCount: written.count,
                        byteCount: written.filter { $0.kind == .file }.reduce(0) { $0 + $1.size },
                        databasesChecked: databases,
                        warning: reader.manifest == nil
                            ? ExtractionPlan.unverifiedWarning : Self.damageWarning(extraction.damagedDatabases.current))
                }
            }
        } catch is CancellationError {
            throw StoreBackupError.cancelled
        }
    }

    /// Extract from an incremental backup: its chain built into a scratch folder beside the
    /// target with only the selected paths (a patched database rebuilt from the chain's
    /// deltas and checked), synced, then renamed into place.
    private static func extractChain(
        _ chain: StagedChain, selection: EntrySelection, into target: String, options: ExtractionOptions,
        throttle: ProgressThrottle
    ) async throws -> ExtractResult {
        let newest = chain.newest
        let files = newest.manifest?.files ?? []
        try selection.requireMatches(in: files.lazy.map(\.path), backupName: newest.name)
        let parent = FileSystem.parentDirectory(of: target)
        return try await runBlocking(name: "storebackup-extract") { cancel in
            var applier = ChainApplier(chain: chain, cancel: cancel, progress: throttle)
            applier.syncsFullAsItUnpacks = true
            applier.options = options
            applier.options.acceptDamagedDatabases = true
            if !selection.selectsEverything { applier.selection = { selection.needs($0) } }
            let scratch = ScratchFiles.path(in: parent, purpose: "extract")
            let databases: [String]
            do {
                databases = try applier.build(into: scratch)
                try TreeSync.sync(scratch)
                try cancel.throwIfCancelled()
                try FileSystem.rename(from: scratch, to: target)
            } catch {
                try? FileSystem.removeTree(scratch)
                throw error
            }
            try FileSystem.fsync(path: parent)
            throttle.report(BackupProgress(phase: .done), force: true)
            let written = files.filter { selection.needs($0.path) }
            return ExtractResult(
                backupName: newest.name, directory: target, entryCount: written.count,
                byteCount: written.filter { StagedChain.isRegular($0.type) }.reduce(0) { $0 + $1.size },
                databasesChecked: databases, warning: damageWarning(applier.damagedDatabases.current))
        }
    }

    /// What extract says of databases that were damaged before the backup; nil for none.
    static func damageWarning(_ damaged: [String: String]) -> String? {
        guard !damaged.isEmpty else { return nil }
        let list = damaged.keys.sorted().joined(separator: ", ")
        return
            "\(list) \(damaged.count == 1 ? "was" : "were") already damaged when the backup was made (it fails its integrity check but matches the backup's checksum); extracted as it was"
    }

    /// The folder to extract into must be new (or an empty folder) in an existing folder.
    static func checkTarget(_ target: String) throws {
        let parent = FileSystem.parentDirectory(of: target)
        guard FileSystem.isDirectory(parent) else {
            throw StoreBackupError.extractRefused(reason: "cannot extract into \(target): \(parent) is not an existing folder")
        }
        guard let info = try? FileSystem.lstatInfo(target) else { return }
        let isEmptyFolder =
            info.st_mode & S_IFMT == S_IFDIR
            && (try? FileManager.default.contentsOfDirectory(atPath: target).isEmpty) == true
        guard isEmptyFolder else {
            throw StoreBackupError.extractRefused(
                reason: "\(target) already exists and is not an empty folder; extract writes only into a new folder (nothing was written)")
        }
    }

    /// Runs `body` on the backup's archive: a local folder's file in place, else the remote
    /// backup read in ranges where the destination serves them (see
    /// ``withRangedReads(of:_:)``), else a download into `folder` (under the scratch
    /// policy), removed afterwards.
    private func withArchive<T: Sendable>(
        of backup: BackupListing, downloadingInto folder: String, progress: ProgressHandler?,
        _ body: (BrowsedArchive) async throws -> T
    ) async throws -> T {
        let name = backup.name
        if let local = destination.localPath(of: name) {
            return try await body(.file(local))
        }
        if let result = try await withRangedReads(of: backup, body) { return result }
        let download = ScratchFiles.path(in: folder, purpose: "download", suffix: ".zip")
        defer { unlink(download) }
        try await destination.download(name, to: download, progress: progress)
        return try await body(.file(download))
    }

    /// The listing: the manifest's rows, or without a manifest the ZIP directory's entries,
    /// sorted in place (a sorted copy would hold the listing twice).
    static func contents(manifest: Manifest?, entries: [ArchiveEntry]) -> [BackupContents.Entry] {
        var listing: [BackupContents.Entry]
        if let manifest {
            listing = manifest.files.map { file in
                BackupContents.Entry(
                    path: file.path, type: file.type, size: file.size,
                    mode: file.mode & 0o7777, modified: Date(timeIntervalSince1970: TimeInterval(file.mtime)),
                    linkTarget: file.linkTarget, sha256: file.sha256)
            }
        } else {
            listing = entries.map { entry in
                let type =
                    switch entry.kind {
                    case .directory: "directory"
                    case .symlink: "symlink"
                    case .file: "file"
                    case .fifo: "fifo"
                    }
                return BackupContents.Entry(
                    path: entry.path, type: type, size: entry.size, mode: entry.permissions,
                    modified: Date(timeIntervalSince1970: TimeInterval(entry.modificationTime)))
            }
        }
        listing.sort { $0.path < $1.path }
        return listing
    }
}
