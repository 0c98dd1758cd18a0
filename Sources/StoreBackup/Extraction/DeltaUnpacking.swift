import CPosix
import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Restore's unpacking with `delta`: builds the new folder (`Stores_New`) from the live store
/// and the backup. A file whose copy from the live store hashes to the manifest's SHA-256 is
/// kept (cloned or copied, ``FileClone``); a database is built block by block
/// (``DeltaDatabase``) where the manifest lists block hashes (format 4), else compared whole;
/// everything else is read from the backup exactly as ``RestoreUnpacking`` reads it
/// (``ParallelUnpacking``), only the entries that differ. From a remote backup read in
/// ranges, that is only the bytes of those entries and blocks.
///
/// The checks are a full restore's: every file's SHA-256 against the manifest (a reused
/// file's copy included), each database's whole SHA-256 and its `integrity_check` or a
/// trusted proof, the tree from the backup's own entries, all made durable before the swap.
struct DeltaUnpacking {
    let reader: ArchiveReader
    /// The live store's bytes.
    let live: LiveStore
    let options: ExtractionOptions
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// See ``RestoreUnpacking/damagedDatabases``.
    let damagedDatabases = Locked<[String: String]>([:])
    /// See ``RestoreUnpacking/databaseVerdicts``.
    let databaseVerdicts = Locked<[String: DatabaseVerdict]>([:])
    /// What was reused and what was read.
    let statistics = Locked(DeltaStatistics())
    var workers = WorkerPool.cores

    /// Unpacks into `target`, which must not exist yet. Returns the databases checked.
    func unpack(into target: String) throws -> [String] {
        guard let manifest = reader.manifest else { throw StoreBackupError.unverifiableBackup(name: reader.backupName) }
        let plan = try ExtractionPlan(reader: reader, incremental: false, options: options)
        let files = EntryList(reader.entries) { $0.kind == .file }
        try plan.checkFreeSpace(writing: files, into: target)
        let root = try ConfinedTree(creating: target)
        let tree = TreeEntries(
            directories: reader.entries.filter { $0.kind == .directory }, fifos: reader.entries.filter { $0.kind == .fifo },
            links: plan.links)
        try tree.makeDirectories(in: root)
        let judge = DamageJudge(
            reader: reader, accept: options.acceptDamagedDatabases, found: damagedDatabases, options: options, judged: databaseVerdicts)
        let scratch = FileSystem.parentDirectory(of: target)
        let total = files.reduce(Int64(0)) { $0 + $1.size }
        let counter = ByteCounter()
        let onBytes: @Sendable (Int64, String) -> Void = { bytes, name in
            progress.report(BackupProgress(phase: .extracting, bytesDone: counter.add(bytes), bytesTotal: total, currentFile: name))
        }
        // Each built database's check and whole SHA-256 run beside the rest of the work.
        let checks = WorkerPool.Feed<DeltaCheck>(name: "storebackup-check", width: 2) { try $0.run() }
        var read = Set<UInt64>()
        let outcome = Result {
            for entry in files where plan.isDatabase(entry) {
                try cancel.throwIfCancelled()
                if let failure = checks.firstFailure { throw failure }
                guard let expected = plan.manifestByPath[entry.path],
                    try reuseDatabase(
                        entry, expected: expected, root: root, scratch: scratch, judge: judge, checks: checks, onBytes: onBytes)
                else {
                    read.insert(entry.index)
                    continue
                }
            }
            read.formUnion(try reuseFiles(files.filter { !plan.isDatabase($0) }, plan: plan, root: root, onBytes: onBytes))
            let fetched = EntryList(reader.entries) { $0.kind == .file && read.contains($0.index) }
            statistics.withLock {
                $0.filesRead += fetched.count
                $0.bytesRead += fetched.reduce(Int64(0)) { $0 + $1.compressedSize }
            }
            // A remote backup: the small entries in few requests, and every local header checked.
            if try !reader.prepareToRead(Array(fetched)) {
                for entry in fetched { try reader.checkLocalHeader(index: entry.index, exact: true) }
            }
            // The entries that differ, the tree around everything, and one sync of it all.
            try ParallelUnpacking(writer: EntryWriter(plan: plan, root: root, cancel: cancel, kept: .all), judge: judge, progress: progress)
                .run(fetched, tree: tree, durable: true)
        }
        let checked = Result { try checks.finish() }
        try outcome.get()
        try checked.get()
        return manifest.databases.map(\.path)
    }

    /// Builds the database `entry` from the live one where there is one to compare: block by
    /// block (format 4), else whole when it hashes to the manifest's SHA-256. Its check and
    /// digest go to `checks`. False, having left nothing behind, when it must be read whole.
    private func reuseDatabase(
        _ entry: ArchiveEntry, expected: Manifest.File, root: ConfinedTree, scratch: String, judge: DamageJudge,
        checks: WorkerPool.Feed<DeltaCheck>, onBytes: @escaping @Sendable (Int64, String) -> Void
    ) throws -> Bool {
        guard let liveDatabase = live.openDatabase(entry.path, scratchDirectory: scratch) else { return false }
        defer { liveDatabase.finish() }
        let path = EscapedName.escapedRoot(root.root) + "/" + entry.path
        let span: ArchiveSpanReader? =
            switch reader.source {
            case .ranged(let archive): .ranged(archive)
            default: reader.localFile.map { .local($0) }
            }
        if let span, let hashes = expected.deflateBlockHashes, try Self.mostlyUnchanged(liveDatabase, hashes: hashes, size: entry.size),
            let first = try EntryBlockReader.open(
                reader: reader, span: span, entry: entry, row: expected, cacheBytes: 0, hashesRequired: true)
        {
            let fd = try root.createFile(entry.path, readBack: true)
            let unpacking = judge.isProven(entry.path) ? nil : try UnpackingDatabase(size: entry.size)
            checks.submit(DeltaCheck { try judge.check(IntegrityCheckJob(path: path, entryPath: entry.path, unpacking: unpacking)) })
            let built: DeltaStatistics
            do {
                let readers = [first] + (1..<max(1, workers)).map { _ in first.sibling() }
                built = try DeltaDatabase(
                    entry: entry, hashes: hashes, readers: readers, live: liveDatabase, cancel: cancel
                )
                .build(into: fd, path: path, unpacking: unpacking) { onBytes($0, entry.path) }
                liveDatabase.finish()
                try Self.finish(fd, entry, path: path)
                unpacking?.finish()
            } catch {
                unpacking?.fail()
                close(fd)
                throw error
            }
            statistics.withLock { $0 = $0 + built }
            checks.submit(
                DeltaCheck(
                    digestOf: OwnedDescriptor(fd), path: path, entry: entry, expected: expected, backupName: reader.backupName,
                    cancel: cancel))
            return true
        }
        // Formats 1-3 (no block hashes): the whole database, or nothing of it.
        guard liveDatabase.size == expected.size else { return false }
        let fd = try root.createFile(entry.path, readBack: true)
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var hasher = SHA256()
        var offset: Int64 = 0
        while offset < entry.size {
            let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), entry.size - offset))])
            guard try liveDatabase.read(into: chunk, at: offset) else { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(chunk))
            try FileSystem.write(fd, UnsafeRawBufferPointer(chunk), at: offset, path: path)
            offset += Int64(chunk.count)
            try cancel.throwIfCancelled()
        }
        liveDatabase.finish()
        guard offset == entry.size, expected.hasSHA256(FileDigest.hex(hasher.finalize())) else {
            try root.remove(entry.path)
            return false
        }
        try Self.finish(fd, entry, path: path)
        onBytes(entry.size, entry.path)
        statistics.withLock {
            $0.filesReused += 1
            $0.bytesReused += entry.size
        }
        checks.submit(DeltaCheck { try judge.check(IntegrityCheckJob(path: path, entryPath: entry.path, unpacking: nil)) })
        return true
    }

    /// Whether enough of a sample of the live database's blocks (evenly spaced) match the
    /// backup's for a block-by-block build to pay: each block read from the backup alone
    /// costs more than its share of the whole entry read at once, and every live block is
    /// hashed besides. Random updates change nearly every 1 MiB block; the whole entry is
    /// then read as a full restore reads it.
    static func mostlyUnchanged(_ live: LiveDatabase, hashes: [RawSHA256], size: Int64) throws -> Bool {
        let blockSize = CompressionPipeline.blockSize
        let samples = min(hashes.count, Self.sampledBlocks)
        guard samples > 0 else { return false }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 16)
        defer { buffer.deallocate() }
        var matched = 0
        for sample in 0..<samples {
            let number = sample * hashes.count / samples
            let offset = Int64(number) * Int64(blockSize)
            let block = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(blockSize), size - offset))])
            guard try live.read(into: block, at: offset) else { continue }
            var hasher = SHA256()
            hasher.update(bufferPointer: UnsafeRawBufferPointer(block))
            if RawSHA256(bytes: hasher.finalize()) == hashes[number] { matched += 1 }
        }
        return matched * Self.requiredShareOfSamples.denominator >= samples * Self.requiredShareOfSamples.numerator
    }

    /// Blocks hashed to decide whether a database is built block by block.
    static let sampledBlocks = 16
    /// The share of them that must match: below it, the time the blocks that match save over
    /// a remote link no longer pays for hashing the live database and building it block by
    /// block (docs/delta-restore.md).
    static let requiredShareOfSamples = (numerator: 1, denominator: 3)

    /// Copies each of `entries` whose live file has the manifest's size and, once copied,
    /// its SHA-256. Returns the indexes of the others, to be read from the backup.
    private func reuseFiles(
        _ entries: [ArchiveEntry], plan: ExtractionPlan, root: ConfinedTree, onBytes: @escaping @Sendable (Int64, String) -> Void
    ) throws -> Set<UInt64> {
        let read = Locked(Set<UInt64>())
        let live = self.live, statistics = self.statistics
        try WorkerPool.forEach(entries, name: "storebackup-reuse", width: workers, cancel: cancel) {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            return { entry in
                guard let expected = plan.manifestByPath[entry.path], let source = live.openFile(entry.path) else {
                    read.withLock { _ = $0.insert(entry.index) }
                    return
                }
                defer { close(source.descriptor) }
                guard source.size == expected.size,
                    try Self.copy(entry, from: source.descriptor, expected: expected, root: root, buffer: buffer)
                else {
                    read.withLock { _ = $0.insert(entry.index) }
                    return
                }
                statistics.withLock {
                    $0.filesReused += 1
                    $0.bytesReused += entry.size
                }
                onBytes(entry.size, entry.path)
            }
        }
        return read.current
    }

    /// Copies a live file into the tree; true when the copy hashes to `expected`'s SHA-256
    /// (and then has its mode and time), false having removed it when not.
    private static func copy(
        _ entry: ArchiveEntry, from source: Int32, expected: Manifest.File, root: ConfinedTree, buffer: UnsafeMutableRawBufferPointer
    ) throws -> Bool {
        let path = EscapedName.escapedRoot(root.root) + "/" + entry.path
        let fd = try root.createFile(entry.path, readBack: true)
        defer { close(fd) }
        _ = try FileClone.copy(from: source, to: fd, size: expected.size, buffer: buffer, path: path)
        // A live file that shrank or grew meanwhile is no copy of the backup's.
        var info = stat()
        guard fstat(fd, &info) == 0, Int64(info.st_size) == expected.size else {
            try root.remove(entry.path)
            return false
        }
        var hasher = SHA256()
        try FileDigest.read(descriptor: fd, path: path, offset: 0, length: expected.size) { _, bytes in
            hasher.update(bufferPointer: bytes)
        }
        guard expected.hasSHA256(FileDigest.hex(hasher.finalize())) else {
            try root.remove(entry.path)
            return false
        }
        try finish(fd, entry, path: path)
        return true
    }

    /// Mode and time, as ``EntryWriter`` sets them, and the start of the file's writeback.
    private static func finish(_ fd: Int32, _ entry: ArchiveEntry, path: String) throws {
        if entry.size >= EntryWriter.startsWritebackFrom { _ = sb_start_writeback(fd, 0, 0) }
        guard fchmod(fd, mode_t(entry.permissions)) == 0 else { throw StoreBackupError.io(path: path, operation: "chmod", errno: errno) }
        let time = timespec(tv_sec: time_t(entry.modificationTime), tv_nsec: 0)
        var times = [time, time]
        guard futimens(fd, &times) == 0 else { throw StoreBackupError.io(path: path, operation: "set time", errno: errno) }
    }
}

/// Work that follows a database a delta restore built: its check, or its whole SHA-256.
struct DeltaCheck: Sendable {
    let run: @Sendable () throws -> Void

    init(_ run: @escaping @Sendable () throws -> Void) { self.run = run }

    /// Reads the database back (from the page cache) and compares its SHA-256 with the
    /// manifest's; `file` is closed when the work is done or skipped.
    init(
        digestOf file: OwnedDescriptor, path: String, entry: ArchiveEntry, expected: Manifest.File, backupName: String,
        cancel: CancellationFlag
    ) {
        run = {
            var hasher = SHA256()
            try FileDigest.read(descriptor: file.descriptor, path: path, offset: 0, length: expected.size) { _, bytes in
                try cancel.throwIfCancelled()
                hasher.update(bufferPointer: bytes)
            }
            guard expected.hasSHA256(FileDigest.hex(hasher.finalize())) else {
                throw StoreBackupError.checksumMismatch(name: backupName, entry: entry.path)
            }
        }
    }
}

/// A descriptor closed when the last holder lets it go (a check skipped after another's failure too).
final class OwnedDescriptor: Sendable {
    let descriptor: Int32
    init(_ descriptor: Int32) { self.descriptor = descriptor }
    deinit { close(descriptor) }
}
