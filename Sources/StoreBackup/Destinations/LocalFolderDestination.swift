import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Backups in a folder on this machine (the default destination).
///
/// Archives are built inside the folder under a hidden temporary name, then published
/// with fsync + rename-without-replace, so `list` never sees a partial file and no
/// backup is ever overwritten. Temporary names are `.storebackup-tmp-<pid>-…` (prefix and the
/// writer's pid), so leftovers from a crashed run are told from a running one's and
/// removed by the next command that lists or writes the folder.
public struct LocalFolderDestination: BackupDestination {
    /// The folder holding the backups (absolute).
    public let folder: String

    /// A destination for `folder`; it is created when the first backup is published.
    public init(folder: String) {
        self.folder = FileSystem.absolutePath(folder)
    }

    /// The folder's absolute path.
    public var displayName: String { folder }

    /// Archives are built in the folder itself, so publishing is an fsync and a rename.
    /// Creates the folder and removes dead runs' temporaries first.
    public func prepareInPlaceArchive() throws -> String? {
        try FileSystem.createDirectories(folder)
        removeStaleTemporaryFiles()
        return temporaryArchivePath()
    }

    /// Every backup file in the folder, dated by its name (else by its modification time);
    /// none when the folder does not exist yet. Dead runs' temporaries are removed first.
    public func listBackups() async throws -> [BackupListing] {
        guard FileSystem.isDirectory(folder) else { return [] }
        removeStaleTemporaryFiles()
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: folder) } catch {
            throw StoreBackupError.destination(destination: folder, reason: "cannot list the folder: \(error.localizedDescription)")
        }
        return names.filter(BackupName.isBackup).compactMap { name in
            var info = stat()
            guard stat(folder + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
            let modified = Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec))
            return BackupListing(name: name, size: Int64(info.st_size), date: BackupName.date(of: name) ?? modified, modified: modified)
        }
    }

    /// Renames `file` into the folder as `name` (a file built elsewhere is first copied next
    /// to it), then fsyncs the file and the folder. Throws `backupExists` rather than replace
    /// a backup; creates the folder when needed.
    public func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try BackupName.validate(name)
        try FileSystem.createDirectories(folder)
        let target = folder + "/" + name
        var source = file
        if FileSystem.parentDirectory(of: file) != folder {
            // Built elsewhere: copy next to the target first so the final step is a rename.
            source = temporaryArchivePath()
            do { try copy(from: file, to: source, progress: progress) } catch {
                unlink(source)  // a copy cut short (disk full) is no use to anyone
                throw error
            }
        }
        do {
            // A backup is read rarely: once it is on disk, none of it should keep the app's own
            // data out of the page cache (the writeback pacer drops most of it as it goes, but
            // lags when the disk does).
            try FileSystem.fsync(path: source, droppingCache: true)
            try FileSystem.renameNoReplace(from: source, to: target)
            try FileSystem.fsync(path: folder)
        } catch StoreBackupError.io(_, _, let code) where code == EEXIST {
            if source != file { unlink(source) }
            throw StoreBackupError.backupExists(name: name, destination: folder)
        }
    }

    /// Checks the base with one `stat`, then publishes as ``upload(file:as:progress:)``.
    public func publishPoint(file: String, as name: String, onto base: BackupListing, progress: ProgressHandler?) async throws {
        var info = stat()
        let found =
            stat(folder + "/" + base.name, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
            ? BackupListing(name: base.name, size: Int64(info.st_size), date: base.date, modified: nil) : nil
        try PointBase.require(base, found: found, at: folder)
        try await upload(file: file, as: name, progress: progress)
    }

    /// Copies the backup `name` to `file`; throws `backupNotFound` when the folder has no such
    /// backup. Restore reads a local backup in place instead (``localPath(of:)``).
    public func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        try BackupName.validate(name)
        let source = folder + "/" + name
        guard FileSystem.fileExists(source) else { throw StoreBackupError.backupNotFound(name: name, destination: folder) }
        try copy(from: source, to: file, progress: progress)
    }

    /// A local backup needs no download: restore reads it in place.
    public func localPath(of name: String) -> String? {
        let path = folder + "/" + name
        return FileSystem.fileExists(path) ? path : nil
    }

    /// Deletes the backup file `name` and fsyncs the folder; throws `backupNotFound` when
    /// there is none.
    public func delete(_ name: String) async throws {
        try BackupName.validate(name)
        let path = folder + "/" + name
        guard unlink(path) == 0 else {
            if errno == ENOENT { throw StoreBackupError.backupNotFound(name: name, destination: folder) }
            throw StoreBackupError.io(path: path, operation: "delete", errno: errno)
        }
        try? FileSystem.fsync(path: folder)
    }

    /// Name for a temporary archive built in this folder by this process.
    func temporaryArchivePath() -> String {
        ScratchFiles.path(in: folder, purpose: "archive", suffix: ".zip")
    }

    /// Removes temporaries whose writing process is gone (a crash or kill -9): archives,
    /// snapshot copies and their SQLite companions.
    func removeStaleTemporaryFiles() {
        ScratchFiles.sweep(folder)
    }

    private func copy(from source: String, to target: String, progress: ProgressHandler?) throws {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw StoreBackupError.io(path: source, operation: "open", errno: errno) }
        defer { close(input) }
        let output = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw StoreBackupError.io(path: target, operation: "create", errno: errno) }
        defer { close(output) }
        var info = stat()
        fstat(input, &info)
        let total = Int64(info.st_size)
        var done: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let got = read(input, &buffer, buffer.count)
            if got < 0 { if errno == EINTR { continue }; throw StoreBackupError.io(path: source, operation: "read", errno: errno) }
            if got == 0 { break }
            var offset = 0
            while offset < got {
                let wrote = buffer.withUnsafeBytes { write(output, $0.baseAddress! + offset, got - offset) }
                if wrote < 0 { if errno == EINTR { continue }; throw StoreBackupError.io(path: target, operation: "write", errno: errno) }
                offset += wrote
            }
            done += Int64(got)
            progress?(BackupProgress(phase: .uploading, bytesDone: done, bytesTotal: total))
        }
        guard fsync(output) == 0 else { throw StoreBackupError.io(path: target, operation: "fsync", errno: errno) }
    }
}
