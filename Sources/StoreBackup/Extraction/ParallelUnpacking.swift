import CPosix
import CZip
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes the files an extraction driver chose into its tree, beside their databases'
/// `PRAGMA integrity_check`, and finishes the tree around them. Every thread started here is
/// joined on every path out, before any error is rethrown; any failure throws, and the
/// driver's caller removes the half-made folder.
struct ParallelUnpacking {
    let writer: EntryWriter
    let judge: DamageJudge
    let progress: ProgressThrottle
    /// Databases whose `PRAGMA integrity_check` waits for their final content: a later backup
    /// of the chain patches, replaces or removes them (their SHA-256 is still checked here).
    /// The check is the longest step of a restore; a chain makes it once per database.
    var deferredChecks: Set<String> = []
    /// Databases changed while they are unpacked (a chain's page deltas, ``DatabasePatch``),
    /// by path: checked (SHA-256 and `integrity_check`) as the patch leaves them.
    var patches: [String: any DatabasePatch] = [:]
    /// How many databases may wait for their read-back SHA-256 (``DeferredDigest``) at
    /// once: each keeps its file open, and a server's store may hold thousands of databases.
    var pendingDigestLimit = Self.defaultPendingDigestLimit
    static let defaultPendingDigestLimit = 32

    private var reader: ArchiveReader { writer.plan.reader }
    private var manifestByPath: ManifestLookup { writer.plan.manifestByPath }
    private var root: ConfinedTree { writer.root }
    private var cancel: CancellationFlag { writer.cancel }
    private var workers: Int { writer.workers }

    /// Makes `tree`'s folders, writes `files`, then finishes `tree` (FIFOs, links, folders'
    /// modes and times). With `durable` (restore and extract) the tree is made durable
    /// (``TreeWriteback``: `syncfs` passes while the other files are written, and one once
    /// every file, link and folder is written, while the databases' checks may still be
    /// running, so the disk's work and the longest check overlap instead of following each
    /// other), and each database (most of a store's bytes) is fsynced on a thread of its own
    /// as soon as it is written. Returns once every check has passed.
    func run(_ files: EntryList, tree: TreeEntries, durable: Bool) throws {
        try tree.makeDirectories(in: root)
        let total = files.reduce(Int64(0)) { $0 + $1.size }
        let counter = ByteCounter()
        let databaseFiles = files.filter(writer.plan.isDatabase)
        let judge = self.judge
        let checks = WorkerPool.Feed<IntegrityCheckJob>(name: "storebackup-check", width: max(1, min(databaseFiles.count, workers))) {
            check in
            try judge.check(check)
        }
        let flushes = durable ? Self.databaseFlushes(in: root) : nil
        let writeback = Result { try durable ? TreeWriteback(root: root.root) : nil }
        // Every thread started here is joined on every path out, before any error is rethrown.
        let unpacked = Result {
            try extractInParallel(Self.readingOrder(files), checks: checks, flushes: flushes, writeback: writeback.get()) {
                bytes, name in
                let done = counter.add(bytes)
                progress.report(BackupProgress(phase: .extracting, bytesDone: done, bytesTotal: total, currentFile: name))
            }
            try tree.finish(in: root, manifest: reader.manifest)
        }
        let flushed = Result { try flushes?.finish() }
        let synced = Result {
            try unpacked.get()
            try flushed.get()
            if let failure = checks.firstFailure { throw failure }
            try writeback.get()?.finish()
        }
        (try? writeback.get())?.stop()
        if case .success = synced, !databaseFiles.isEmpty {
            progress.report(BackupProgress(phase: .checking, currentFile: databaseFiles.map(\.path).joined(separator: ", ")), force: true)
        }
        let checked = Result { try checks.finish() }
        try synced.get()
        try checked.get()
        try cancel.throwIfCancelled()
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

    /// The databases first, one at a time on all cores (each inflated in parallel), so that
    /// the first can be checked as soon as possible: each database's `integrity_check` runs
    /// on a thread of its own while the next database and then the other files are unpacked.
    /// One unpacked in blocks is checked while it is written (``UnpackingDatabase``), the
    /// others once written. The check is the longest single-threaded step of a restore; this
    /// way the other files cost no time beside it. Such a database's SHA-256 is checked by
    /// reading it back once all are unpacked (or `pendingDigestLimit` wait), before the other
    /// files, so that a mismatch is the error reported even if the check fails too. The
    /// checks are left running; the caller waits for them.
    /// Files of a MiB or more from the largest down, so that no big file is left for one
    /// thread at the end; the smaller ones after them in the archive's order, so that their
    /// reads run forward through it (in order of size they jumped all over the archive, a
    /// read of the archive for nearly every file).
    static func readingOrder(_ files: EntryList) -> EntryList {
        files.ordered { first, second in
            let firstIsLarge = first.size >= 1 << 20, secondIsLarge = second.size >= 1 << 20
            if firstIsLarge != secondIsLarge { return firstIsLarge }
            return firstIsLarge ? first.size > second.size : first.archiveOffset < second.archiveOffset
        }
    }

    private func extractInParallel(
        _ files: EntryList, checks: WorkerPool.Feed<IntegrityCheckJob>, flushes: WorkerPool.Feed<String>?,
        writeback: TreeWriteback?, onBytes: @escaping @Sendable (Int64, String) -> Void
    ) throws {
        let databases = files.filter(writer.plan.isDatabase)
        // With databases, one core is kept for their checks (the longest step of a big
        // store's restore) and lent to the other files once no check is left to run (a store
        // of many small files and a small database: the files are most of the work).
        let keptForChecks = databases.allSatisfy { judge.isProven($0.path) } ? 0 : 1
        let otherWidth = min(max(1, workers - keptForChecks), ArchiveLimits.maxExtractionHandles)
        let lentWidth = min(keptForChecks, ArchiveLimits.maxExtractionHandles - otherWidth)
        let checksIdle = WorkerGate()
        // One libzip handle for every thread, if any needs one: the reader's, idle meanwhile.
        let archive = SharedArchiveHandle(reader: reader)
        if !databases.isEmpty {
            let buffers = EntryReadBuffers(capacity: Self.readBufferSize(largest: databases.lazy.map(\.size).max() ?? 0))
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
                let followed =
                    !deferred && !judge.isProven(database.path)
                    && expected.flatMap { EntryWriter.blockPlan(entry: database, expected: $0) } != nil
                let unpacking = followed ? try UnpackingDatabase(size: patch?.finalSize ?? database.size) : nil
                let digest = try writer.writeFile(
                    database, archive: archive, buffers: buffers, expected: expected, patch: patch,
                    unpacking: unpacking.map { unpacking in
                        (unpacking, { checks.submit(IntegrityCheckJob(path: path, entryPath: database.path, unpacking: unpacking)) })
                    },
                    onBytes: onBytes)
                digests += digest.map { [$0] } ?? []
                if unpacking == nil && !deferred {
                    checks.submit(IntegrityCheckJob(path: path, entryPath: database.path, unpacking: nil))
                }
                flushes?.submit(database.path)
                if digests.count >= pendingDigestLimit { try verifyDigests(&digests) }
            }
            try verifyDigests(&digests)
        }
        checks.whenIdle {
            checksIdle.open()
            writeback?.begin()
        }
        // The databases are skipped as they come rather than filtered out, and the workers
        // take positions in the reader's list: a copy of the entries would cost memory per entry.
        let entries = files.all
        let otherBytes: @Sendable (Int64, String) -> Void = { bytes, name in
            onBytes(bytes, name)
            writeback?.wrote(bytes)
        }
        let bufferSize = Self.readBufferSize(largest: files.lazy.filter { !writer.plan.isDatabase($0) }.map(\.size).max() ?? 0)
        try WorkerPool.forEach(
            files.positions, name: "storebackup-extract", width: otherWidth, lateWidth: lentWidth, lateGate: checksIdle,
            cancel: cancel
        ) {
            // Each thread has buffers of its own; the handle is shared.
            let buffers = EntryReadBuffers(capacity: bufferSize)
            return { position in
                let entry = entries[Int(position)]
                if writer.plan.isDatabase(entry) { return }
                if let failure = checks.firstFailure { throw failure }
                try writer.writeFile(
                    entry, archive: archive, buffers: buffers, expected: manifestByPath[entry.path], onBytes: otherBytes)
            }
        }
    }

    /// The bytes of each thread's read buffer: 1 MiB, or less when the largest file to read
    /// through it is smaller (a store of small files needs no megabyte per thread).
    static func readBufferSize(largest: Int64) -> Int {
        Int(min(max(largest, 16 << 10), 1 << 20))
    }

    /// Reads back the databases waiting for their SHA-256 and checks each, then lets them go.
    private func verifyDigests(_ digests: inout [DeferredDigest]) throws {
        for digest in digests { try digest.verify(backupName: reader.backupName, cancel: cancel) }
        digests.removeAll()
    }
}
