import CZip
import Foundation

/// Where an ``ArchiveReader`` reads its archive's bytes. The reader opens every kind the same
/// way (central directory checked, libzip handle opened, entries read); what differs between
/// them is here, so that the reader holds one value and tests no kind it does not need.
/// An enum rather than more of ``ArchiveBytes``: the kinds differ in more than reading bytes
/// by offset (a file is listed and read without libzip, a remote archive learns its layout).
enum ArchiveSource: Sendable {
    /// A complete backup file on this machine, at `path`: listed without libzip when it can
    /// be (``ArchiveReader``), its small entries read without libzip (`LocalEntryReader`),
    /// its pages dropped once read. The ``LocalArchiveFile`` is nil when the path cannot be
    /// opened as a regular file; libzip then opens the path itself and says why it cannot.
    case file(path: String, LocalArchiveFile?)
    /// A remote archive read in ranges. Opened without libzip's check of every local header
    /// (one request each): the reader checks the header of each entry it reads instead
    /// (``ArchiveReader/checkLocalHeader(index:exact:)``).
    case ranged(RangedArchive)
    /// A download still arriving, with every check a file gets but libzip's check of each
    /// local header (`ZIP_CHECKCONS`, which reads them all and so would wait for the whole
    /// download): the caller makes it with ``ArchiveReader/checkConsistency(path:backupName:)``
    /// once the file is complete, before anything unpacked from it is used.
    case arriving(ArrivingArchive)

    /// The complete file on this machine, for reads without libzip; nil for a remote or
    /// arriving archive.
    var localFile: LocalArchiveFile? {
        guard case .file(_, let file) = self else { return nil }
        return file
    }

    /// What drops the archive's pages once read: nil for a remote archive (nothing is cached
    /// here) and when the file cannot be opened again.
    func makePageCache() -> ArchivePageCache? {
        switch self {
        case .file(let path, _): ArchivePageCache(path: path)
        case .ranged: nil
        case .arriving(let arriving): ArchivePageCache(path: arriving.path)
        }
    }

    /// Checks the end records and the central directory with fixed buffers
    /// (``CentralDirectoryCheck``) before libzip reads them. Returns each entry's local header
    /// offset, by libzip index. A remote archive fetches its end first, and its on-demand
    /// chunks stop where the check found entries starting.
    func checkCentralDirectory(backupName: String) throws -> [Int64] {
        switch self {
        case .file(let path, _):
            return try CentralDirectoryCheck(path: path, backupName: backupName).run()
        case .ranged(let ranged):
            try ranged.fetchTail()
            let layout = try CentralDirectoryCheck(path: backupName, backupName: backupName).run(ranged)
            ranged.setLayout(layout)
            return layout.offsets
        case .arriving(let arriving):
            return try CentralDirectoryCheck(path: arriving.path, backupName: backupName).run(arriving).offsets
        }
    }

    /// A new libzip handle on the archive (libzip handles are not shared between threads).
    func openHandle(backupName: String) throws -> OpaquePointer {
        switch self {
        case .file(let path, _): try Self.openCompleteFile(path: path, backupName: backupName)
        case .ranged(let ranged): try ranged.openHandle(backupName: backupName)
        case .arriving(let arriving): try arriving.openHandle(backupName: backupName)
        }
    }

    /// A libzip handle on the complete file at `path`, with libzip's check of every local
    /// header against the central directory (`ZIP_CHECKCONS`).
    static func openCompleteFile(path: String, backupName: String) throws -> OpaquePointer {
        if let file = LocalArchiveFile(path: path) {
            return try ZipSource.openHandle(over: file, backupName: backupName, flags: ZIP_RDONLY | ZIP_CHECKCONS) { nil }
        }
        var code: Int32 = 0
        let handle = ArchiveReader.openLock.withLock { zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code) }
        guard let handle else {
            var error = zip_error_t()
            zip_error_init_with_code(&error, code)
            defer { zip_error_fini(&error) }
            throw StoreBackupError.corruptArchive(
                name: backupName, reason: "not a readable ZIP archive (\(String(cString: zip_error_strerror(&error))))")
        }
        return handle
    }
}
