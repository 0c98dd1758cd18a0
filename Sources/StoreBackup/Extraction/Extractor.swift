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

    /// fsyncs each database handed in, one at a time, beside the unpacking. An error is kept
    /// and rethrown (a failed fsync must not go unreported: the final sync would not see it).
    private static func databaseFlushes(in root: ConfinedTree) -> WorkerPool.Feed<String> {
        WorkerPool.Feed<String>(name: "storebackup-flush", width: 1) { relative in
            // A database restored without read permission is left to the final sync.
            guard let fd = try? root.openFileForReading(relative) else { return }
            defer { close(fd) }
            guard fsync(fd) == 0 else { throw StoreBackupError.io(path: root.root + "/" + relative, operation: "fsync", errno: errno) }
        }
    }

    /// FIFOs, then links last (their targets exist by now), then every folder's mode and
    /// time, deepest first, so that writing into a folder does not change its time again.
    private func finishTree(
        _ root: ConfinedTree, links: [(entry: ArchiveEntry, target: String)], fifos: [ArchiveEntry],
        directories: [ArchiveEntry]
    ) throws {
        for fifo in fifos {
            try root.createFIFO(fifo.path, permissions: fifo.permissions, modificationTime: fifo.modificationTime)
        }
        if !verifyOnly {
            for (link, destination) in links where isSelected(link.path) {
                try root.createLink(link.path, target: destination, modificationTime: link.modificationTime)
            }
        }

        for directory in directories.sorted(by: { $0.path.count > $1.path.count }) {
            try root.setDirectoryAttributes(
                directory.path, permissions: directory.permissions, modificationTime: directory.modificationTime)
        }
        let rootMode: UInt32 = reader.manifest?.rootMode ?? 0o755
        let rootTime: Int64 = reader.manifest?.rootMtime ?? Int64(Date().timeIntervalSince1970)
        try root.setDirectoryAttributes(nil, permissions: rootMode & 0o7777, modificationTime: rootTime)
    }

    /// Bytes the files take on disk: their declared sizes plus a block per entry,
    /// saturating instead of overflowing on absurd declared sizes.
    static func diskUsage(of files: [ArchiveEntry], entryCount: Int) -> Int64 {
        var total = Int64(entryCount) * 4096
        for file in files {
            let (sum, overflow) = total.addingReportingOverflow(max(0, file.size))
            total = overflow ? Int64.max : sum
        }
        return total
    }

    /// Reads every link's target (raw bytes, escaped); where each leads is judged by
    /// ``ArchiveTree``, through the archive's other links.
    private func readLinks(manifestByPath: ManifestLookup) throws -> [(entry: ArchiveEntry, target: String)] {
        try reader.entries.filter { $0.kind == .symlink }.map { link in
            let bytes = try reader.readSmallEntry(index: link.index, limit: ArchiveLimits.maxLinkTargetBytes)
            let target = EscapedName.escape(bytes)
            guard !bytes.isEmpty, !bytes.contains(0) else {
                throw StoreBackupError.unsafeArchiveEntry(name: reader.backupName, entry: "\(link.path) -> \(target)")
            }
            if let expected = manifestByPath[link.path]?.linkTarget, expected != target {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: link.path)
            }
            return (link, target)
        }
    }

    /// Every archive entry must be in the manifest with the same kind and size, and every
    /// manifest entry in the archive: a missing or extra file is damage.
    private func crossCheckManifest() throws -> ManifestLookup {
        guard let manifest = reader.manifest else { return .empty }
        return try ManifestLookup.crossChecked(manifest, entries: reader.entries, backupName: reader.backupName)
    }

    /// A database to pass through `PRAGMA integrity_check`; with `unpacking`, while it is written.
    struct DatabaseCheckJob: Sendable {
        let path: String
        /// The path relative to the stores directory, for messages.
        let entryPath: String
        let unpacking: UnpackingDatabase?
    }

    /// Tells a database damaged before the backup from a damaged backup. Every database's bytes
    /// are compared with the manifest's SHA-256, and a mismatch is the error reported even when
    /// the check fails too (``extractInParallel``). So a database of a backup with a manifest
    /// that fails its check while the extraction goes on without a mismatch is one whose live
    /// copy was already damaged: the backup kept it faithfully.
    struct DamageJudge: Sendable {
        let backupName: String
        let hasManifest: Bool
        let accept: Bool
        let found: Locked<[String: String]>

        func check(_ check: DatabaseCheckJob) throws {
            do {
                try Extractor.checkDatabase(check.path, unpacking: check.unpacking)
            } catch let error as StoreBackupError where hasManifest && Self.isDamage(error) {
                let result = Self.sqliteAnswer(error)
                found.withLock { $0[check.entryPath] = result }
                guard accept else {
                    throw StoreBackupError.databaseDamagedAtSource(name: backupName, databases: [check.entryPath], result: result)
                }
                // Taken as it is, by request: the reload's check need not refuse it again.
                if let unpacking = check.unpacking, !unpacking.waitUntilDone() { return }
                CheckedDatabases.record(check.path)
            }
        }

        /// A failed check, or SQLite calling the file malformed before the check could run.
        static func isDamage(_ error: StoreBackupError) -> Bool {
            switch error {
            case .databaseCheckFailed: return true
            case .sqlite(_, _, let message): return message.contains("malformed")
            default: return false
            }
        }

        static func sqliteAnswer(_ error: StoreBackupError) -> String {
            switch error {
            case .databaseCheckFailed(_, let result): return result
            case .sqlite(_, _, let message): return message
            default: return error.summary
            }
        }
    }

    /// The databases first, one at a time on all cores (each inflated in parallel), so that
    /// the first can be checked as soon as possible: each database's `integrity_check` runs
    /// on a thread of its own while the next database and then the other files are unpacked.
    /// One unpacked in blocks is checked while it is written (``UnpackingDatabase``), the
    /// others once written. The check is the longest single-threaded step of a restore; this
    /// way the other files cost no time beside it. Such a database's SHA-256 is checked by
    /// reading it back once all are unpacked (or `pendingDigestLimit` wait), before the other
    /// files, so that a mismatch is the error reported even if the check fails too. The
    /// checks are left running; the caller waits for them.
    private func extractInParallel(
        _ files: [ArchiveEntry], into root: ConfinedTree, manifestByPath: ManifestLookup,
        checks: WorkerPool.Feed<DatabaseCheckJob>, flushes: WorkerPool.Feed<String>?,
        onBytes: @escaping @Sendable (Int64, String) -> Void
    ) throws {
        let databases = files.filter(isDatabase)
        let otherWidth = min(max(1, workers - (databases.isEmpty ? 0 : 1)), ArchiveLimits.maxExtractionHandles)
        // One libzip handle for every thread: the reader's, idle meanwhile.
        let archive = SharedArchiveHandle(borrowing: reader.idleHandle)
        if !databases.isEmpty {
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            var digests: [DeferredDigest] = []
            for database in databases {
                try cancel.throwIfCancelled()
                if let failure = checks.firstFailure {
                    // A database that does not match its manifest is the truer answer.
                    try verifyDigests(&digests)
                    throw failure
                }
                let path = EscapedName.escapedRoot(root.root) + "/" + database.path
                let expected = manifestByPath[database.path]
                let patch = patches[database.path]
                let deferred = patch == nil && deferredChecks.contains(database.path)
                let followed = !deferred && expected.flatMap { Self.blockPlan(entry: database, expected: $0) } != nil
                let unpacking = followed ? try UnpackingDatabase(size: patch?.finalSize ?? database.size) : nil
                let digest = try extractFile(
                    database, archive: archive, buffer: &buffer, into: root, expected: expected, patch: patch,
                    unpacking: unpacking.map { unpacking in
                        (unpacking, { checks.submit(DatabaseCheckJob(path: path, entryPath: database.path, unpacking: unpacking)) })
                    },
                    onBytes: onBytes)
                digests += digest.map { [$0] } ?? []
                if unpacking == nil && !deferred {
                    checks.submit(DatabaseCheckJob(path: path, entryPath: database.path, unpacking: nil))
                }
                flushes?.submit(database.path)
                if digests.count >= pendingDigestLimit { try verifyDigests(&digests) }
            }
            try verifyDigests(&digests)
        }
        // The databases are skipped as they come rather than filtered out: a copy of the
        // list would cost memory per entry.
        try WorkerPool.forEach(files, name: "storebackup-extract", width: otherWidth, cancel: cancel) {
            // Each thread has a buffer of its own; the handle is shared.
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            return { entry in
                if isDatabase(entry) { return }
                if let failure = checks.firstFailure { throw failure }
                try extractFile(
                    entry, archive: archive, buffer: &buffer, into: root,
                    expected: manifestByPath[entry.path], onBytes: onBytes)
            }
        }
    }

    /// Reads back the databases waiting for their SHA-256 and checks each, then lets them go.
    private func verifyDigests(_ digests: inout [DeferredDigest]) throws {
        for digest in digests { try digest.verify(backupName: reader.backupName, cancel: cancel) }
        digests.removeAll()
    }

    /// Writes one entry, checking it against its CRC and the manifest. With `unpacking` (only
    /// for an entry read in blocks), `start` runs once the file exists, the readers of
    /// `unpacking` follow the blocks as they are written, and the SHA-256 is left to the
    /// returned ``DeferredDigest``. With `patch`, the readers and the final checks see the
    /// file as the patch leaves it.
    @discardableResult
    private func extractFile(
        _ entry: ArchiveEntry, archive: SharedArchiveHandle, buffer: inout [UInt8], into root: ConfinedTree,
        expected: Manifest.File?, patch: (any DatabasePatch)? = nil, unpacking: (file: UnpackingDatabase, start: () -> Void)? = nil,
        onBytes: @Sendable (Int64, String) -> Void
    ) throws -> DeferredDigest? {
        let path = EscapedName.escapedRoot(root.root) + "/" + entry.path
        // Verify without a manifest finds databases by their first bytes, so it decides
        // whether to write a file only once it has read them.
        let decideByHeader = verifyOnly && reader.manifest == nil
        var fd: Int32 =
            try (!verifyOnly || isDatabase(entry) ? root.createFile(entry.path, readBack: unpacking != nil || patch != nil) : -1)
        defer { if fd >= 0 { close(fd) } }
        if let expected, let plan = Self.blockPlan(entry: entry, expected: expected) {
            var finished = false
            // Whatever goes wrong, a reader waiting for more bytes is let go.
            defer { if !finished { unpacking?.file.fail() } }
            unpacking?.start()
            patch?.hashesContent = false
            let inflater = ParallelInflater(
                archive: archive.pointer, archiveLock: archive.lock, entry: entry, blockSize: plan.blockSize,
                compressedBlocks: plan.blocks, workers: workers, cancel: cancel,
                password: reader.password, backupName: reader.backupName,
                pageCache: reader.pageCache, hashesContent: unpacking == nil)
            var written: Int64 = 0
            // The blocks come back in order, each already written at its offset.
            let result = try inflater.run(descriptor: fd, path: path) { bytes in
                written += bytes
                let final = try patch?.advance(descriptor: fd, path: path, written: written) ?? written
                unpacking?.file.advance(to: final)
                onBytes(bytes, entry.path)
            }
            // WinZip AE-2 entries under 20 bytes carry no CRC (libzip writes 0); the HMAC and SHA-256 still hold.
            let crcMatches = result.crc == entry.crc || (entry.isEncrypted && entry.size < 20)
            // Not hashed on the way in: there must be a digest to check when reading back.
            let sha256Matches = result.sha256.map { $0 == expected.sha256 } ?? (expected.sha256 != nil)
            guard crcMatches, result.size == expected.size, sha256Matches else {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
            try patch?.finish(descriptor: fd, path: path)
            try finishFile(fd: fd, entry: entry, path: path, patch: patch)
            unpacking?.file.finish()
            finished = true
            reader.pageCache?.drop(entry)
            // A patched database is checked as the patch left it, against the chain's newest manifest.
            guard let expectedSHA256 = patch?.finalSHA256 ?? (result.sha256 == nil ? expected.sha256 : nil) else { return nil }
            let digest = DeferredDigest(
                owning: fd, path: path, entryPath: entry.path, size: patch?.finalSize ?? expected.size, expectedSHA256: expectedSHA256)
            fd = -1
            return digest
        }
        precondition(unpacking == nil, "only an entry read in blocks is checked while it is written")
        var failure = ""
        let opened = archive.withLock { handle in
            let file = zip_fopen_index(handle, entry.index, 0)
            if file == nil { failure = String(cString: zip_strerror(handle)) }
            return file
        }
        guard let file = opened else {
            throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path): \(failure)")
        }
        defer { archive.withLock { _ in _ = zip_fclose(file) } }
        var hasher = SHA256()
        var written: Int64 = 0
        while true {
            let (got, failure) = archive.withLock { _ in
                let got = buffer.withUnsafeMutableBytes { zip_fread(file, $0.baseAddress, zip_uint64_t($0.count)) }
                return (got, got < 0 ? String(cString: zip_file_strerror(file)) : "")
            }
            if got < 0 {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path): \(failure)")
            }
            if got == 0 { break }
            // Stop before writing a byte past the declared size (libzip checks the CRC only at the end).
            guard got <= entry.size - written else {
                throw StoreBackupError.corruptArchive(
                    name: reader.backupName, reason: "\(entry.path) holds more than its declared \(entry.size) bytes")
            }
            if decideByHeader && written == 0 && got >= 16 && Array(buffer[0..<16]) == SQLiteHeader.magic {
                fd = try root.createFile(entry.path)
            }
            try buffer.withUnsafeBytes { bytes in
                let chunk = UnsafeRawBufferPointer(rebasing: bytes[0..<Int(got)])
                hasher.update(bufferPointer: chunk)
                if fd >= 0 { try Self.writeAll(fd, chunk, path: path) }
            }
            written += Int64(got)
            onBytes(Int64(got), entry.path)
            try cancel.throwIfCancelled()
        }
        guard written == entry.size else {
            throw StoreBackupError.corruptArchive(
                name: reader.backupName, reason: "\(entry.path) holds \(written) bytes, not its declared \(entry.size)")
        }
        if let expected {
            let digest = FileDigest.hex(hasher.finalize())
            guard expected.size == written, expected.sha256 == digest else {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
        }
        if let patch {
            _ = try patch.advance(descriptor: fd, path: path, written: written)
            try patch.finish(descriptor: fd, path: path)
        }
        try finishFile(fd: fd, entry: entry, path: path, patch: patch)
        reader.pageCache?.drop(entry)
        return nil
    }

    /// How to read an entry through `ParallelInflater`: the manifest's block index, or for an
    /// encrypted deflated entry of one block, that one block. The latter decrypts with AES-NI
    /// instead of libzip's much slower AES, which matters for stores of many small files.
    static func blockPlan(entry: ArchiveEntry, expected: Manifest.File) -> (blockSize: Int, blocks: [Int])? {
        if let blockSize = expected.deflateBlockSize, let blocks = expected.deflateBlocks,
            ParallelInflater.canUse(entry: entry, blockSize: blockSize, blocks: blocks)
        {
            return (blockSize, blocks)
        }
        let single = [Int(entry.compressedSize) - WinZipAES.overhead]
        if entry.isEncrypted, expected.deflateBlocks == nil, entry.size <= Int64(CompressionPipeline.blockSize),
            ParallelInflater.canUse(entry: entry, blockSize: CompressionPipeline.blockSize, blocks: single)
        {
            return (CompressionPipeline.blockSize, single)
        }
        return nil
    }

    /// Mode and time, set through the open descriptor; the file's last dirty pages start
    /// for the disk now (small files never reach a writeback step), so the sync that
    /// follows the unpacking has only the last few files left to wait for. A patched file
    /// takes the patch's mode and time: set once, after its last write.
    private func finishFile(fd: Int32, entry: ArchiveEntry, path: String, patch: (any DatabasePatch)? = nil) throws {
        guard fd >= 0 else { return }
        _ = sb_start_writeback(fd, 0, 0)
        let permissions = patch.map { $0.finalPermissions & 0o7777 } ?? UInt32(entry.permissions)
        let modificationTime = patch?.finalModificationTime ?? Int64(entry.modificationTime)
        guard fchmod(fd, mode_t(permissions)) == 0 else { throw StoreBackupError.io(path: path, operation: "chmod", errno: errno) }
        var times = [
            timespec(tv_sec: time_t(modificationTime), tv_nsec: 0),
            timespec(tv_sec: time_t(modificationTime), tv_nsec: 0),
        ]
        guard futimens(fd, &times) == 0 else { throw StoreBackupError.io(path: path, operation: "set time", errno: errno) }
        fileWritten?()
    }

    private static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let wrote = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if wrote < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: path, operation: "write", errno: errno)
            }
            offset += wrote
        }
    }

    private func isSelected(_ path: String) -> Bool { selection?(path) ?? true }

    /// Databases as the manifest names them; without a manifest, verify decides by a
    /// file's first bytes as it reads them (``extractFile``).
    private func isDatabase(_ entry: ArchiveEntry) -> Bool {
        guard let manifest = reader.manifest else { return false }
        return manifest.databases.contains { $0.path == entry.path }
    }

    /// The manifest names the databases; an archive without one (made by another tool)
    /// is searched by header instead.
    private func databasePaths(in target: String, files: [ArchiveEntry]) throws -> [String] {
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

    /// `PRAGMA integrity_check` on an extracted database nobody else has open; with
    /// `unpacking`, on one still being written.
    static func checkDatabase(_ path: String, unpacking: UnpackingDatabase? = nil) throws {
        let connection = try SQLiteConnection(path: path, mode: unpacking.map { .unpacking($0) } ?? .immutable)
        defer { connection.close() }
        try connection.check(quick: false)
        // Closed and passed: reload need not read the same bytes again (CheckedDatabases),
        // once the file is as it stays (its mode and time are set last).
        connection.close()
        if let unpacking, !unpacking.waitUntilDone() { return }
        CheckedDatabases.record(path)
    }

    private func checkDatabases(_ paths: [String]) throws {
        try WorkerPool.forEach(paths, name: "storebackup-check", width: workers, cancel: cancel) { path in
            try Self.checkDatabase(path)
        }
    }
}
