import CPosix
import CZip
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Unpacks a backup into a new folder, treating the archive as hostile input.
///
/// Before anything is written: every name was checked by ``ArchiveReader`` (raw bytes, no
/// control characters, no `..`, no absolute paths), every entry must be in the manifest
/// with the same type and size, every link's target is resolved through the archive's
/// other links and must stay inside, and the declared sizes must fit in the target file
/// system with a reserve left for the app. Then each file is written through a directory
/// descriptor (``ConfinedTree``), checked against its SHA-256 while it is written (a
/// database unpacked in blocks: read back right after, beside its check, see
/// ``DeferredDigest``) and cut off the moment it exceeds its declared size; links come
/// last. Every database passes `PRAGMA integrity_check`. Any failure throws; the caller
/// removes the half-made folder.
struct Extractor {
    let reader: ArchiveReader
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    var workers: Int = WorkerPool.cores
    /// Verify mode: every file is read and checked, but only the databases are written
    /// (they must exist on disk for `PRAGMA integrity_check`); links are not created.
    var verifyOnly = false
    /// Accept an archive without a manifest (checking only CRCs and databases).
    var allowUnverified = false
    /// Make the links the manifest records as pointing outside the store (create warned
    /// about them); without it they are refused, naming the option. Links the manifest
    /// does not record are refused either way.
    var allowOutsideLinks = false
    /// Write only the entries whose archive-relative path this accepts (`extract` of a few
    /// files); nil writes every entry. The checks before writing still cover the whole archive.
    var selection: (@Sendable (String) -> Bool)? = nil
    /// How the caller makes the unpacked tree durable (restore and extract: one `syncfs`),
    /// given the tree's root. It runs once every file, link and folder is written, while the
    /// databases' checks may still be running, so the disk's work and the longest check
    /// overlap instead of following each other. When it is set, each database (most of a
    /// store's bytes) is also fsynced on a thread of its own as soon as it is written, so
    /// the final sync has only the other files left.
    var syncTree: (@Sendable (String) throws -> Void)? = nil
    /// Called once each file is written and checked: extract's test pause point, where a
    /// test cancels it part-way. nil for restore and verify.
    var fileWritten: (@Sendable () -> Void)? = nil
    /// How many databases may wait for their read-back SHA-256 (``DeferredDigest``) at
    /// once: each keeps its file open, and a server's store may hold thousands of databases.
    var pendingDigestLimit = 32
    /// Let a database through that fails `PRAGMA integrity_check` although it matches its
    /// manifest checksum (damaged in the live store before the backup, see
    /// ``StoreBackupError/databaseDamagedAtSource(name:databases:result:)``); each is listed
    /// in ``damagedDatabases``. Off: the first such database ends the extraction with that error.
    var acceptDamagedDatabases = false
    /// The databases found damaged at the source so far: relative path and SQLite's answer.
    let damagedDatabases = Locked<[String: String]>([:])
    /// Applying an incremental backup of a chain (format 3): the target exists and holds the
    /// tree as its base left it (the caller removed what this backup replaces), and the files
    /// the manifest marks with a `source` have no entry here. Without it, an incremental
    /// backup is refused: alone it is only part of a store.
    var applyingIncremental = false
    /// Databases whose `PRAGMA integrity_check` waits for their final content: a later backup
    /// of the chain patches, replaces or removes them (their SHA-256 is still checked here).
    /// The check is the longest step of a restore; a chain makes it once per database.
    var deferredChecks: Set<String> = []
    /// Databases changed while they are unpacked (a chain's page deltas, ``DatabasePatch``),
    /// by path: checked (SHA-256 and `integrity_check`) as the patch leaves them.
    var patches: [String: any DatabasePatch] = [:]

    /// What an archive without a manifest leaves unchecked, for the caller to say.
    static let unverifiedWarning =
        "the backup has no manifest: only CRCs and PRAGMA integrity_check were checked (no SHA-256 of any file, no list of what should be there)"

    /// Extracts into `target`, which must not exist yet. Returns the databases checked.
    @discardableResult
    func extract(into target: String) throws -> [String] {
        if let manifest = reader.manifest, manifest.isIncremental != applyingIncremental {
            throw applyingIncremental
                ? StoreBackupError.corruptArchive(
                    name: reader.backupName, reason: "it is a full backup where its chain needs an incremental")
                : StoreBackupError.brokenChain(
                    name: reader.backupName,
                    reason: "it holds only what changed since \(manifest.base?.name ?? "its base"), and was read without its chain")
        }
        let manifestByPath = try crossCheckManifest()
        let links = try readLinks(manifestByPath: manifestByPath)
        var kinds: [String: ArchiveEntry.Kind] = [:]
        for entry in reader.entries { kinds[entry.path] = entry.kind }
        // Files whose content is in the base are in the tree too: nothing may sit beneath them.
        for file in reader.manifest?.files ?? [] where file.source != nil { kinds[file.path] = .file }
        var tree = ArchiveTree(
            kinds: kinds, linkTargets: Dictionary(links.map { ($0.entry.path, $0.target) }) { first, _ in first },
            backupName: reader.backupName)
        try tree.check(recordedOutside: Set(reader.manifest?.outsideLinks ?? []), allowOutside: allowOutsideLinks)
        if reader.manifest == nil && !allowUnverified {
            throw StoreBackupError.unverifiableBackup(name: reader.backupName)
        }
        let files = reader.entries.filter { $0.kind == .file && isSelected($0.path) }
        let fifos = verifyOnly ? [] : reader.entries.filter { $0.kind == .fifo && isSelected($0.path) }
        let written = verifyOnly && reader.manifest != nil ? files.filter(isDatabase) : files
        try FreeSpace.check(
            needed: Self.diskUsage(of: written, entryCount: reader.entries.count),
            in: FileSystem.parentDirectory(of: target), backupName: reader.backupName)

        let root = try applyingIncremental ? ConfinedTree(opening: target) : ConfinedTree(creating: target)
        let directories = reader.entries.filter { $0.kind == .directory && isSelected($0.path) }
        for directory in directories.sorted(by: { $0.path < $1.path }) {
            try root.makeDirectories(directory.path)
        }

        let total = files.reduce(Int64(0)) { $0 + $1.size }
        let counter = ByteCounter()
        let databaseFiles = files.filter(isDatabase)
        let judge = DamageJudge(
            backupName: reader.backupName, hasManifest: reader.manifest != nil,
            accept: acceptDamagedDatabases, found: damagedDatabases)
        let checks = WorkerPool.Feed<DatabaseCheckJob>(name: "storebackup-check", width: max(1, min(databaseFiles.count, workers))) {
            check in
            try judge.check(check)
        }
        let flushes = syncTree.map { _ in Self.databaseFlushes(in: root) }
        // Every thread started here is joined on every path out, before any error is rethrown.
        let unpacked = Result {
            try extractInParallel(
                files.sorted { $0.size > $1.size }, into: root, manifestByPath: manifestByPath,
                checks: checks, flushes: flushes
            ) { bytes, name in
                let done = counter.add(bytes)
                progress.report(BackupProgress(phase: .extracting, bytesDone: done, bytesTotal: total, currentFile: name))
            }
            try finishTree(root, links: links, fifos: fifos, directories: directories)
        }
        let flushed = Result { try flushes?.finish() }
        let synced = Result {
            try unpacked.get()
            try flushed.get()
            if let failure = checks.firstFailure { throw failure }
            try syncTree?(target)
        }
        if case .success = synced, !databaseFiles.isEmpty {
            progress.report(BackupProgress(phase: .checking, currentFile: databaseFiles.map(\.path).joined(separator: ", ")), force: true)
        }
        let checked = Result { try checks.finish() }
        try synced.get()
        try checked.get()
        try cancel.throwIfCancelled()

        let databases = try databasePaths(in: target, files: files)
        if reader.manifest == nil {
            // Found only now, by header: check them here.
            progress.report(BackupProgress(phase: .checking, currentFile: databases.joined(separator: ", ")), force: true)
            try checkDatabases(databases.map { EscapedName.escapedRoot(target) + "/" + $0 })
        }
        return databases
    }

    func isSelected(_ path: String) -> Bool { selection?(path) ?? true }

    /// Databases as the manifest names them; without a manifest, verify decides by a
    /// file's first bytes as it reads them (``extractFile``).
    func isDatabase(_ entry: ArchiveEntry) -> Bool {
        guard let manifest = reader.manifest else { return false }
        return manifest.databases.contains { $0.path == entry.path }
    }

    /// The manifest names the databases; an archive without one (made by another tool)
    /// is searched by header instead.
    func databasePaths(in target: String, files: [ArchiveEntry]) throws -> [String] {
        if let manifest = reader.manifest {
            // In an incremental, only the databases stored whole here were unpacked (and checked).
            let unpacked = applyingIncremental ? Set(files.map(\.path)) : nil
            return manifest.databases.map(\.path).filter { path in isSelected(path) && (unpacked?.contains(path) ?? true) }
        }
        // Only files on disk can be databases (verify writes nothing else); none is a link.
        let escapedTarget = EscapedName.escapedRoot(target)
        return files.map(\.path).filter { path in
            let full = escapedTarget + "/" + path
            var info = stat()
            return EscapedName.withSystemPath(full, { lstat($0, &info) }) == 0 && SQLiteHeader.isDatabase(path: full)
        }
    }
}
