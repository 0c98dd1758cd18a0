import CZip
import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Unpacks a verified-as-it-goes archive into a new folder: checks each file's SHA-256
/// and size against the manifest while writing it (one pass), restores modes and times,
/// refuses links that point outside, then runs `PRAGMA integrity_check` on every
/// database. Any failure throws; the caller removes the half-made folder.
struct Extractor {
    let reader: ArchiveReader
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    var workers: Int = ProcessInfo.processInfo.activeProcessorCount
    /// Verify mode: every file is read and checked, but only the databases are written
    /// (they must exist on disk for `PRAGMA integrity_check`); links are not created.
    var verifyOnly = false

    /// Extracts into `target`, which must not exist yet. Returns the databases checked.
    @discardableResult
    func extract(into target: String) throws -> [String] {
        let manifestByPath = try crossCheckManifest()
        let links = try readLinks(manifestByPath: manifestByPath)
        guard mkdir(target, 0o700) == 0 else { throw StoreBackupError.io(path: target, operation: "create", errno: errno) }

        let directories = reader.entries.filter { $0.kind == .directory }
        for directory in directories.sorted(by: { $0.path < $1.path }) {
            try FileSystem.createDirectories(target + "/" + directory.path, mode: 0o700)
        }
        let files = reader.entries.filter { $0.kind == .file }
        for file in files {
            let parent = FileSystem.parentDirectory(of: target + "/" + file.path)
            if !FileSystem.isDirectory(parent) { try FileSystem.createDirectories(parent, mode: 0o700) }
        }

        let total = files.reduce(Int64(0)) { $0 + $1.size }
        let counter = ByteCounter()
        try extractInParallel(files.sorted { $0.size > $1.size }, into: target, manifestByPath: manifestByPath) { bytes, name in
            let done = counter.add(bytes)
            progress.report(BackupProgress(phase: .extracting, bytesDone: done, bytesTotal: total, currentFile: name))
        }

        if !verifyOnly { try createLinks(links, into: target) }

        for directory in directories.sorted(by: { $0.path.count > $1.path.count }) {
            try applyAttributes(path: target + "/" + directory.path, permissions: directory.permissions, mtime: directory.modificationTime)
        }

        try applyAttributes(path: target, permissions: reader.manifest?.rootMode ?? 0o755,
                            mtime: reader.manifest?.rootMtime ?? Int64(Date().timeIntervalSince1970))

        let databases = try databasePaths(in: target, files: files)
        if reader.manifest == nil {
            // Found only now, by header: check them here.
            progress.report(BackupProgress(phase: .checking, currentFile: databases.joined(separator: ", ")), force: true)
            try checkDatabases(databases.map { target + "/" + $0 })
        }
        return databases
    }

    /// Reads every link's target and refuses any that would point outside the store.
    private func readLinks(manifestByPath: [String: Manifest.File]) throws -> [(entry: ArchiveEntry, target: String)] {
        try reader.entries.filter { $0.kind == .symlink }.map { link in
            let target = String(decoding: try reader.readSmallEntry(index: link.index, limit: 4096), as: UTF8.self)
            guard ArchiveReader.isContainedLink(linkPath: link.path, target: target) else {
                throw StoreBackupError.unsafeArchiveEntry(name: reader.backupName, entry: "\(link.path) -> \(target)")
            }
            if let expected = manifestByPath[link.path]?.linkTarget, expected != target {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: link.path)
            }
            return (link, target)
        }
    }

    private func createLinks(_ links: [(entry: ArchiveEntry, target: String)], into root: String) throws {
        for (link, destination) in links {
            let path = root + "/" + link.path
            let parent = FileSystem.parentDirectory(of: path)
            if !FileSystem.isDirectory(parent) { try FileSystem.createDirectories(parent, mode: 0o700) }
            guard symlink(destination, path) == 0 else { throw StoreBackupError.io(path: path, operation: "create link", errno: errno) }
            var times = [timespec(tv_sec: time_t(link.modificationTime), tv_nsec: 0),
                         timespec(tv_sec: time_t(link.modificationTime), tv_nsec: 0)]
            utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW)
        }
    }

    /// Every archive entry must be in the manifest with the same kind, and every
    /// manifest entry in the archive: a missing or extra file is damage.
    private func crossCheckManifest() throws -> [String: Manifest.File] {
        guard let manifest = reader.manifest else { return [:] }
        var byPath: [String: Manifest.File] = [:]
        for file in manifest.files { byPath[file.path] = file }
        for entry in reader.entries {
            guard let expected = byPath[entry.path] else {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path) is not in its manifest")
            }
            let expectedKind: ArchiveEntry.Kind = expected.type == "directory" ? .directory : expected.type == "symlink" ? .symlink : .file
            guard expectedKind == entry.kind else {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path) has the wrong type")
            }
        }
        let present = Set(reader.entries.map(\.path))
        if let missing = manifest.files.first(where: { !present.contains($0.path) }) {
            throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(missing.path) is missing")
        }
        return byPath
    }

    private func extractInParallel(
        _ files: [ArchiveEntry], into target: String, manifestByPath: [String: Manifest.File],
        onBytes: @escaping @Sendable (Int64, String) -> Void
    ) throws {
        let queue = WorkQueue(items: files)
        let failures = FirstFailure()
        let group = DispatchGroup()
        let threadCount = max(1, min(workers, files.count))
        for number in 0..<threadCount {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                do {
                    let archive = try reader.openHandle()
                    defer { zip_discard(archive) }
                    var buffer = [UInt8](repeating: 0, count: 1 << 20)
                    while let entry = queue.next(), !failures.hasFailed {
                        try cancel.throwIfCancelled()
                        try extractFile(entry, archive: archive, buffer: &buffer, into: target,
                                        expected: manifestByPath[entry.path], onBytes: onBytes)
                        // Check a database as soon as it is whole, while other threads keep
                        // extracting (databases are usually the largest entries, so come first).
                        if reader.manifest?.databases.contains(where: { $0.path == entry.path }) == true {
                            try Self.checkDatabase(target + "/" + entry.path)
                        }
                    }
                } catch {
                    failures.record(error)
                }
            }
            thread.name = "storebackup-extract-\(number)"
            thread.start()
        }
        group.wait()
        if let error = failures.first { throw error }
        try cancel.throwIfCancelled()
    }

    private func extractFile(
        _ entry: ArchiveEntry, archive: OpaquePointer, buffer: inout [UInt8], into target: String,
        expected: Manifest.File?, onBytes: @Sendable (Int64, String) -> Void
    ) throws {
        let path = target + "/" + entry.path
        let write = !verifyOnly || isDatabase(entry)
        let fd = write ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) : -1
        guard fd >= 0 || !write else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        defer { if fd >= 0 { close(fd) } }
        if let expected, let plan = Self.blockPlan(entry: entry, expected: expected) {
            let inflater = ParallelInflater(archive: archive, entry: entry, blockSize: plan.blockSize,
                                            compressedBlocks: plan.blocks, workers: workers, cancel: cancel,
                                            password: reader.password, backupName: reader.backupName)
            let result = try inflater.run(descriptor: fd, path: path) { onBytes($0, entry.path) }
            // WinZip AE-2 entries under 20 bytes carry no CRC (libzip writes 0); the HMAC and SHA-256 still hold.
            let crcMatches = result.crc == entry.crc || (entry.isEncrypted && entry.size < 20)
            guard crcMatches, result.size == expected.size, result.sha256 == expected.sha256 else {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
            try finishFile(fd: fd, entry: entry, path: path)
            return
        }
        guard let file = zip_fopen_index(archive, entry.index, 0) else {
            throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path): \(String(cString: zip_strerror(archive)))")
        }
        defer { zip_fclose(file) }
        var hasher = SHA256()
        var written: Int64 = 0
        while true {
            let got = buffer.withUnsafeMutableBytes { zip_fread(file, $0.baseAddress, zip_uint64_t($0.count)) }
            if got < 0 {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path): \(String(cString: zip_file_strerror(file)))")
            }
            if got == 0 { break }
            try buffer.withUnsafeBytes { bytes in
                let chunk = UnsafeRawBufferPointer(rebasing: bytes[0..<Int(got)])
                hasher.update(bufferPointer: chunk)
                if fd >= 0 { try Self.writeAll(fd, chunk, path: path) }
            }
            written += Int64(got)
            onBytes(Int64(got), entry.path)
            try cancel.throwIfCancelled()
        }
        if let expected {
            let digest = hasher.finalize().map { String(format: "%02x", $0) }.joined()
            guard expected.size == written, expected.sha256 == nil || expected.sha256 == digest else {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
        }
        try finishFile(fd: fd, entry: entry, path: path)
    }

    /// How to read an entry through `ParallelInflater`: the manifest's block index, or for an
    /// encrypted deflated entry of one block, that one block. The latter decrypts with AES-NI
    /// instead of libzip's much slower AES, which matters for stores of many small files.
    static func blockPlan(entry: ArchiveEntry, expected: Manifest.File) -> (blockSize: Int, blocks: [Int])? {
        if let blockSize = expected.deflateBlockSize, let blocks = expected.deflateBlocks,
           ParallelInflater.canUse(entry: entry, blockSize: blockSize, blocks: blocks) {
            return (blockSize, blocks)
        }
        let single = [Int(entry.compressedSize) - WinZipAES.overhead]
        if entry.isEncrypted, expected.deflateBlocks == nil, entry.size <= Int64(CompressionPipeline.blockSize),
           ParallelInflater.canUse(entry: entry, blockSize: CompressionPipeline.blockSize, blocks: single) {
            return (CompressionPipeline.blockSize, single)
        }
        return nil
    }

    /// Mode and time, set through the open descriptor.
    private func finishFile(fd: Int32, entry: ArchiveEntry, path: String) throws {
        guard fd >= 0 else { return }
        guard fchmod(fd, mode_t(entry.permissions)) == 0 else { throw StoreBackupError.io(path: path, operation: "chmod", errno: errno) }
        var times = [timespec(tv_sec: time_t(entry.modificationTime), tv_nsec: 0),
                     timespec(tv_sec: time_t(entry.modificationTime), tv_nsec: 0)]
        guard futimens(fd, &times) == 0 else { throw StoreBackupError.io(path: path, operation: "set time", errno: errno) }
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

    private func applyAttributes(path: String, permissions: UInt32, mtime: Int64) throws {
        guard chmod(path, mode_t(permissions)) == 0 else { throw StoreBackupError.io(path: path, operation: "chmod", errno: errno) }
        var times = [timespec(tv_sec: time_t(mtime), tv_nsec: 0), timespec(tv_sec: time_t(mtime), tv_nsec: 0)]
        guard utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw StoreBackupError.io(path: path, operation: "set time", errno: errno)
        }
    }

    /// Databases as the manifest names them; without a manifest every file counts (it must
    /// be on disk to be recognised by its header).
    private func isDatabase(_ entry: ArchiveEntry) -> Bool {
        guard let manifest = reader.manifest else { return true }
        return manifest.databases.contains { $0.path == entry.path }
    }

    /// The manifest names the databases; an archive without one (made by another tool)
    /// is searched by header instead.
    private func databasePaths(in target: String, files: [ArchiveEntry]) throws -> [String] {
        if let manifest = reader.manifest { return manifest.databases.map(\.path) }
        return files.map(\.path).filter { SQLiteHeader.isDatabase(path: target + "/" + $0) }
    }

    /// `PRAGMA integrity_check` on an extracted database nobody else has open.
    static func checkDatabase(_ path: String) throws {
        let connection = try SQLiteConnection(path: path, mode: .immutable)
        defer { connection.close() }
        try connection.check(quick: false)
    }

    private func checkDatabases(_ paths: [String]) throws {
        let queue = WorkQueue(items: paths)
        let failures = FirstFailure()
        DispatchQueue.concurrentPerform(iterations: max(1, min(workers, paths.count))) { _ in
            while let path = queue.next(), !failures.hasFailed {
                do {
                    try cancel.throwIfCancelled()
                    try Self.checkDatabase(path)
                } catch {
                    failures.record(error)
                }
            }
        }
        if let error = failures.first { throw error }
    }
}

/// Hands out items to several threads, each once.
final class WorkQueue<Item>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Item]
    private var position = 0
    init(items: [Item]) { self.items = items }
    func next() -> Item? {
        lock.withLock {
            guard position < items.count else { return nil }
            defer { position += 1 }
            return items[position]
        }
    }
}

/// Keeps the first error any thread hit.
final class FirstFailure: @unchecked Sendable {
    private let lock = NSLock()
    private var error: Error?
    var hasFailed: Bool { lock.withLock { error != nil } }
    var first: Error? { lock.withLock { error } }
    func record(_ error: Error) { lock.withLock { if self.error == nil { self.error = error } } }
}
