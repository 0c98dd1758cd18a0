import CPosix
import CZip
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension Extractor {
    /// fsyncs each database handed in, one at a time, beside the unpacking. An error is kept
    /// and rethrown (a failed fsync must not go unreported: the final sync would not see it).
    static func databaseFlushes(in root: ConfinedTree) -> WorkerPool.Feed<String> {
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
    func extractInParallel(
        _ files: [ArchiveEntry], into root: ConfinedTree, manifestByPath: [String: Manifest.File],
        checks: WorkerPool.Feed<DatabaseCheckJob>, flushes: WorkerPool.Feed<String>?,
        onBytes: @escaping @Sendable (Int64, String) -> Void
    ) throws {
        let databases = files.filter(isDatabase)
        let others = files.filter { !isDatabase($0) }
        let otherWidth = min(max(1, workers - (databases.isEmpty ? 0 : 1)), ArchiveLimits.maxExtractionHandles)
        if !databases.isEmpty {
            let archive = try ArchiveHandle(reader.openHandle())
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
                    database, archive: archive.pointer, buffer: &buffer, into: root, expected: expected, patch: patch,
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
        // The first thread borrows the reader's handle (idle meanwhile): each handle holds a
        // copy of the central directory, the largest memory per entry.
        let readerHandleLent = Locked(false)
        try WorkerPool.forEach(others, name: "storebackup-extract", width: otherWidth, cancel: cancel) {
            // Each thread reads through its own libzip handle and buffer.
            let borrow = readerHandleLent.withLock { lent in
                defer { lent = true }; return !lent
            }
            let archive = borrow ? ArchiveHandle(reader.idleHandle, owned: false) : try ArchiveHandle(reader.openHandle())
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            return { entry in
                if let failure = checks.firstFailure { throw failure }
                try extractFile(
                    entry, archive: archive.pointer, buffer: &buffer, into: root,
                    expected: manifestByPath[entry.path], onBytes: onBytes)
            }
        }
    }

    /// Reads back the databases waiting for their SHA-256 and checks each, then lets them go.
    func verifyDigests(_ digests: inout [DeferredDigest]) throws {
        for digest in digests { try digest.verify(backupName: reader.backupName, cancel: cancel) }
        digests.removeAll()
    }
}

/// A libzip handle of one thread, discarded (read-only: nothing to write) when it goes.
private final class ArchiveHandle {
    let pointer: OpaquePointer
    /// False for a handle lent by the reader, which discards it itself.
    let owned: Bool
    init(_ pointer: OpaquePointer, owned: Bool = true) { self.pointer = pointer; self.owned = owned }
    deinit { if owned { zip_discard(pointer) } }
}
