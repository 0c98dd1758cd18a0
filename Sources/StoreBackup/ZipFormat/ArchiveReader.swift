import CPosix
import CZip
import Crypto
import Foundation

/// What can be learnt about a backup file without its password.
public enum BackupInspection {
    /// Whether the backup archive at `path` is encrypted, from its manifest entry's header
    /// (libzip reads only the central directory; no password needed). nil when unreadable.
    public static func isEncrypted(archiveAt path: String) -> Bool? {
        var code: Int32 = 0
        guard let handle = ArchiveReader.openLock.withLock({ zip_open(path, ZIP_RDONLY, &code) }) else { return nil }
        defer { zip_discard(handle) }
        var stat = zip_stat_t()
        guard zip_stat(handle, Manifest.archivePath, 0, &stat) == 0 else { return nil }
        return stat.encryption_method != UInt16(ZIP_EM_NONE)
    }
}

/// One entry of an archive as restore sees it. Restore and verify hold one per entry, so
/// the fields are stored in the narrowest types their values fit (64 bytes with the path's
/// reference) and read back in the types libzip uses.
struct ArchiveEntry: Sendable {
    enum Kind: Sendable { case directory, file, symlink, fifo }
    /// Path relative to the stores directory, without a trailing slash, in ``EscapedName``'s
    /// form (a store's own `.storebackup` entries already mapped back, see ``ArchiveNames``).
    let path: String
    let modificationTime: Int64
    let size: Int64
    let compressedSize: Int64
    /// Where the entry's local header starts in the archive file.
    let archiveOffset: Int64
    /// libzip's index (below ``ArchiveLimits/maxEntries``, checked before any entry is read).
    private let storedIndex: UInt32
    let crc: UInt32
    /// Permission bits with set-user-ID, set-group-ID and sticky (12 bits).
    private let storedPermissions: UInt16
    /// The ZIP compression method (16 bits in the format).
    private let storedCompressionMethod: UInt16
    /// libzip's ZIP_EM_* (ZIP_EM_NONE unless the entry is encrypted).
    let encryptionMethod: UInt16
    let kind: Kind

    init(
        index: UInt64, path: String, kind: Kind, permissions: UInt32, modificationTime: Int64, size: Int64, compressedSize: Int64,
        compressionMethod: Int32, crc: UInt32, encryptionMethod: UInt16, archiveOffset: Int64 = 0
    ) {
        precondition(index <= UInt64(UInt32.max) && permissions <= 0o7777, "entry \(index) is out of range")
        self.path = path
        self.modificationTime = modificationTime
        self.size = size
        self.compressedSize = compressedSize
        self.archiveOffset = archiveOffset
        storedIndex = UInt32(index)
        self.crc = crc
        storedPermissions = UInt16(permissions)
        storedCompressionMethod = UInt16(truncatingIfNeeded: compressionMethod)
        self.encryptionMethod = encryptionMethod
        self.kind = kind
    }

    var index: UInt64 { UInt64(storedIndex) }
    var permissions: UInt32 { UInt32(storedPermissions) }
    var compressionMethod: Int32 { Int32(storedCompressionMethod) }
    var isEncrypted: Bool { encryptionMethod != UInt16(ZIP_EM_NONE) }
}

/// Opens a backup archive read-only and describes its entries. Every path is checked
/// here, once: nothing may land outside the target (`..`, absolute paths, empty parts).
/// Any other byte is a legal name: names are read as raw bytes and kept escaped.
// Unchecked: its properties are set in init only (or cleared by release, once nobody reads them); `archive` is used only
// by the thread that opened it (workers use openHandle).
final class ArchiveReader: @unchecked Sendable {
    let path: String
    let backupName: String
    private(set) var entries: [ArchiveEntry] = []
    private(set) var manifest: Manifest?
    /// Hex SHA-256 of the manifest entry's bytes (decrypted), which an incremental backup's
    /// manifest names to tie itself to this one; nil without a manifest.
    private(set) var manifestSHA256: String?
    /// (Format 3.) The page delta entries, `.storebackup/pages/<entry name>`, by the store
    /// path of the database each patches.
    private(set) var pageDeltas: [String: ArchiveEntry] = [:]
    /// The format the archive's marker entry announces (1 when it has none).
    private(set) var markerFormat = 1
    /// The password, once checked; nil for an archive without encrypted entries.
    private(set) var password: BackupPassword?
    /// Nil once ``release()`` let it go.
    private var archive: OpaquePointer?
    /// Each entry's local header offset, by libzip index (from ``CentralDirectoryCheck``):
    /// copied into the entries, then let go (8 bytes an entry).
    private var localHeaderOffsets: [Int64]
    /// Drops the archive's pages once read (nil when the file cannot be opened again).
    let pageCache: ArchivePageCache?
    /// The remote archive read in ranges, when it is one (see ``init(ranged:backupName:passwords:)``).
    private(set) var ranged: RangedArchive?
    /// The downloaded file still arriving, when it is one (see ``init(arriving:backupName:passwords:)``).
    private(set) var arriving: ArrivingArchive?

    /// Opens the archive. If it is encrypted, asks `passwords` for the password and checks
    /// it on the manifest (or the first encrypted entry) before anything else is read:
    /// `passwordRequired` without one, `wrongPassword` when it does not fit.
    init(path: String, backupName: String, passwords: PasswordProvider? = nil) throws {
        self.path = path
        self.backupName = backupName
        // Counts, sizes and names are checked with fixed buffers before libzip allocates for them.
        localHeaderOffsets = try CentralDirectoryCheck(path: path, backupName: backupName).run()
        pageCache = ArchivePageCache(path: path)
        archive = try Self.open(path: path, backupName: backupName)
        // If this throws, deinit still runs (every property is set) and discards the handle.
        try readEntries(passwords: passwords)
    }

    /// Opens a remote archive through ranged reads, with every check a file gets; libzip's
    /// check of each entry's local header is made for the entries read (``checkLocalHeader(index:exact:)``).
    init(ranged: RangedArchive, backupName: String, passwords: PasswordProvider? = nil) throws {
        self.path = backupName
        self.backupName = backupName
        try ranged.fetchTail()
        let layout = try CentralDirectoryCheck(path: backupName, backupName: backupName).run(ranged)
        ranged.setLayout(layout)
        localHeaderOffsets = layout.offsets
        pageCache = nil
        self.ranged = ranged
        archive = try ranged.openHandle(backupName: backupName)
        try readEntries(passwords: passwords)
    }

    /// Opens a download still arriving, with every check a file gets but libzip's check of
    /// each local header (`ZIP_CHECKCONS`, which reads them all and so would wait for the
    /// whole download): the caller makes it with ``checkConsistency(path:backupName:)`` once
    /// the file is complete, before anything unpacked from it is used.
    init(arriving: ArrivingArchive, backupName: String, passwords: PasswordProvider? = nil) throws {
        self.path = arriving.path
        self.backupName = backupName
        localHeaderOffsets = try CentralDirectoryCheck(path: arriving.path, backupName: backupName).run(arriving).offsets
        pageCache = ArchivePageCache(path: arriving.path)
        self.arriving = arriving
        archive = try arriving.openHandle(backupName: backupName)
        try readEntries(passwords: passwords)
    }

    /// libzip's consistency check of the complete archive at `path` (every local header
    /// against the central directory), as ``init(path:backupName:passwords:)`` makes it.
    static func checkConsistency(path: String, backupName: String) throws {
        zip_discard(try open(path: path, backupName: backupName))
    }

    /// Another handle on the same file, for another thread, with the password set.
    func openHandle() throws -> OpaquePointer {
        let handle =
            try ranged?.openHandle(backupName: backupName) ?? arriving?.openHandle(backupName: backupName)
            ?? Self.open(path: path, backupName: backupName)
        if let password {
            guard password.withCString({ zip_set_default_password(handle, $0) }) == 0 else {
                zip_discard(handle)
                throw StoreBackupError.corruptArchive(name: backupName, reason: "cannot set the password")
            }
        }
        return handle
    }

    /// The reader's own handle (password set), for one thread at a time while the reader is
    /// not used otherwise (extraction lends it to one worker instead of opening another).
    var idleHandle: OpaquePointer {
        guard let archive else { preconditionFailure("the reader of \(backupName) was released") }
        return archive
    }

    deinit { if let archive { zip_discard(archive) } }

    /// Lets go of what the reader holds in memory (its libzip handle with its copy of the
    /// central directory, the entry list, the manifest, the page deltas) once nothing will
    /// read the archive again: a chain restore keeps each of its backups only while a later
    /// step needs it. Streams opened before (``openEntryStream(_:)``) have handles of their own.
    func release() {
        if let archive { zip_discard(archive) }
        archive = nil
        entries = []
        manifest = nil
        pageDeltas = [:]
        // They were many small blocks spread through the heap, which glibc keeps resident
        // once free: what comes next (the reload's scan of the restored tree, a listing)
        // would grow beside them instead of in their pages. Trimming returns the free pages.
        malloc_trim(0)
    }

    /// Opens another handle on the same file; libzip handles are not shared between threads.
    static func open(path: String, backupName: String) throws -> OpaquePointer {
        if let file = LocalArchiveFile(path: path) {
            return try ZipSource.openHandle(over: file, backupName: backupName, flags: ZIP_RDONLY | ZIP_CHECKCONS) { nil }
        }
        var code: Int32 = 0
        let handle = openLock.withLock { zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code) }
        guard let handle else {
            var error = zip_error_t()
            zip_error_init_with_code(&error, code)
            defer { zip_error_fini(&error) }
            throw StoreBackupError.corruptArchive(
                name: backupName, reason: "not a readable ZIP archive (\(String(cString: zip_error_strerror(&error))))")
        }
        return handle
    }

    /// libzip's zip_open is not safe to call from several threads at once (GUIDE §5).
    static let openLock = NSLock()

    private func readEntries(passwords: PasswordProvider?) throws {
        let count = zip_get_num_entries(archive, 0)
        guard count >= 0 else { throw StoreBackupError.corruptArchive(name: backupName, reason: "cannot read the entry list") }
        markerFormat = try checkFormatMarkers(count: UInt64(count))
        var seen = Set<String>()
        // Grown by doubling, the list would hold two copies at once for a moment.
        entries.reserveCapacity(Int(min(UInt64(count), UInt64(ArchiveLimits.maxEntries))))
        var nameBytes = 0
        var manifestIndex: UInt64?
        var encryptedIndex: UInt64?
        for index in 0..<UInt64(count) {
            var stat = zip_stat_t()
            // ZIP_FL_ENC_RAW: the name's bytes as stored, not converted from CP437 (a name
            // that is not UTF-8 is a Linux name like any other).
            guard zip_stat_index(archive, index, zip_flags_t(ZIP_FL_ENC_RAW), &stat) == 0, let rawName = stat.name else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(index) is unreadable")
            }
            let rawBytes = UnsafeRawBufferPointer(start: rawName, count: strlen(rawName))
            let name = EscapedName.escape(rawBytes)
            if let problem = Self.lengthProblem(rawBytes) {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(name.prefix(300)) has \(problem)")
            }
            nameBytes += strlen(rawName)
            if name == Manifest.archivePath {
                manifestIndex = index
                if stat.encryption_method != UInt16(ZIP_EM_NONE) { encryptedIndex = encryptedIndex ?? index }
                continue
            }
            if stat.encryption_method != UInt16(ZIP_EM_NONE) && encryptedIndex == nil { encryptedIndex = index }
            let isDirectoryName = name.hasSuffix("/")
            let entryName = isDirectoryName ? String(name.dropLast()) : name
            guard Self.isSafeRelativePath(entryName) else {
                throw StoreBackupError.unsafeArchiveEntry(name: backupName, entry: name)
            }
            let path: String
            switch ArchiveNames.storePath(forEntryName: entryName, format: markerFormat) {
            case .store(let storePath): path = storePath
            case .own: continue
            case .pageDelta(let database):
                guard !isDirectoryName, pageDeltas[database] == nil else {
                    throw StoreBackupError.corruptArchive(name: backupName, reason: "the page delta of \(database) appears twice")
                }
                pageDeltas[database] = ArchiveEntry(
                    index: index, path: database, kind: .file, permissions: 0o600, modificationTime: 0,
                    size: Int64(clamping: stat.size), compressedSize: Int64(clamping: stat.comp_size),
                    compressionMethod: Int32(stat.comp_method), crc: stat.crc, encryptionMethod: stat.encryption_method)
                continue
            case .unknown: throw StoreBackupError.unsafeArchiveEntry(name: backupName, entry: name)
            }
            guard seen.insert(path).inserted else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "\(path) appears twice")
            }
            var opsys: UInt8 = 0
            var attributes: UInt32 = 0
            zip_file_get_external_attributes(archive, index, 0, &opsys, &attributes)
            let unixMode: UInt32? = opsys == UInt8(ZIP_OPSYS_UNIX) && attributes >> 16 != 0 ? attributes >> 16 : nil
            let kind: ArchiveEntry.Kind
            switch unixMode.map({ $0 & UnixMode.typeMask }) {
            case UnixMode.directory?: kind = .directory
            case UnixMode.symlink?: kind = .symlink
            case UnixMode.fifo?: kind = .fifo
            default: kind = isDirectoryName ? .directory : .file
            }
            // Every permission bit, set-user-ID, set-group-ID and sticky too: the store had them.
            // Restore runs as the user restoring and sets no owner, so a set-user-ID file is
            // that user's (as a copy made with `cp -p` would be).
            let permissions = unixMode.map { $0 & 0o7777 } ?? (kind == .directory ? 0o755 : 0o644)
            entries.append(
                ArchiveEntry(
                    index: index, path: path, kind: kind, permissions: permissions,
                    modificationTime: modificationTime(index: index, stat: stat), size: Int64(clamping: stat.size),
                    compressedSize: Int64(clamping: stat.comp_size), compressionMethod: Int32(stat.comp_method), crc: stat.crc,
                    encryptionMethod: stat.encryption_method,
                    archiveOffset: index < UInt64(localHeaderOffsets.count) ? localHeaderOffsets[Int(index)] : 0))
        }
        // Only needed to find duplicates: let it go before the manifest is read and decoded.
        seen = []
        localHeaderOffsets = []
        if let encryptedIndex {
            try checkPassword(passwords, onEntry: manifestIndex.flatMap { encrypted($0) ? $0 : nil } ?? encryptedIndex)
        }
        if let manifestIndex {
            var stat = zip_stat_t()
            var manifestLimit = ArchiveLimits.maxManifestBytes(entries: Int(count), nameBytes: nameBytes)
            // A format-3 manifest may list files that live in earlier backups of its chain.
            if markerFormat >= 3 { manifestLimit = max(manifestLimit, ArchiveLimits.maxChainManifestBytes) }
            guard zip_stat_index(archive, manifestIndex, 0, &stat) == 0, stat.size <= UInt64(manifestLimit) else {
                throw StoreBackupError.corruptArchive(
                    name: backupName, reason: "its manifest is larger than \(manifestLimit) bytes, too large for \(count) entries")
            }
            // Read as a stream and decoded row by row (the text is never held whole), with the
            // rows bounded by the entries as they come (one row per entry, and one per database).
            let rowLimit = markerFormat >= 3 ? max(entries.count, ArchiveLimits.maxChainManifestRows) : entries.count
            try checkLocalHeader(index: manifestIndex)
            guard let file = zip_fopen_index(archive, manifestIndex, 0) else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_strerror(archive)))
            }
            defer { zip_fclose(file) }
            do {
                (manifest, manifestSHA256) = try ManifestStreamDecoder.decode(
                    maxBytes: Int(manifestLimit), maxRows: 2 * rowLimit + 2, entries: entries
                ) { buffer in
                    let got = zip_fread(file, buffer.baseAddress, zip_uint64_t(buffer.count))
                    guard got >= 0 else {
                        throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_file_strerror(file)))
                    }
                    return Int(got)
                }
            } catch ManifestStreamDecoder.Failure.tooManyRows {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "its manifest lists more files than the archive holds")
            } catch ManifestStreamDecoder.Failure.newer(let format) {
                throw StoreBackupError.newerFormat(name: backupName, format: format, newestReadable: Manifest.newestReadableFormat)
            } catch ManifestStreamDecoder.Failure.tooLarge {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "entry too large")
            } catch is ManifestStreamDecoder.Failure {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "its manifest cannot be read")
            }
            // Format 3's own entries (page deltas, page maps) are accepted only where the
            // manifest says format 3 too, and a delta only for a database the manifest patches.
            if !pageDeltas.isEmpty, let manifest {
                let patched = Set(manifest.files.filter { $0.source == "pages" }.map(\.path))
                if manifest.format < 3 || markerFormat < 3 {
                    throw StoreBackupError.unsafeArchiveEntry(name: backupName, entry: ".storebackup/pages/")
                }
                if let stray = pageDeltas.keys.sorted().first(where: { !patched.contains($0) }) {
                    throw StoreBackupError.corruptArchive(
                        name: backupName, reason: "it holds a page delta for \(stray), which its manifest does not patch")
                }
            }
        }
    }

    /// A later format is announced by an entry `.storebackup/format-N` as well as by the
    /// manifest's `format` field (see docs/FORMAT.md): looked for among all names before any
    /// entry is judged, so that a newer archive is refused as newer, not as damaged or unsafe
    /// because of a name this version does not know.
    /// Returns the highest format announced (1 when no marker).
    private func checkFormatMarkers(count: UInt64) throws -> Int {
        var announced = 1
        for index in 0..<count {
            guard let raw = zip_get_name(archive, index, zip_flags_t(ZIP_FL_ENC_RAW)),
                let format = Manifest.format(ofMarkerEntry: raw)
            else { continue }
            if format > Manifest.newestReadableFormat {
                throw StoreBackupError.newerFormat(name: backupName, format: format, newestReadable: Manifest.newestReadableFormat)
            }
            announced = max(announced, format)
        }
        return announced
    }

    private func encrypted(_ index: UInt64) -> Bool {
        var stat = zip_stat_t()
        return zip_stat_index(archive, index, 0, &stat) == 0 && stat.encryption_method != UInt16(ZIP_EM_NONE)
    }

    /// Asks for the password and checks it against one entry's verifier, before any extraction.
    private func checkPassword(_ passwords: PasswordProvider?, onEntry index: UInt64) throws {
        guard let passwords else { throw StoreBackupError.passwordRequired(name: backupName) }
        let password = try passwords.password()
        guard password.withCString({ zip_set_default_password(archive, $0) }) == 0 else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "cannot set the password")
        }
        // libzip derives the key and compares the 2-byte verifier when the entry is opened.
        try checkLocalHeader(index: index)
        guard let file = zip_fopen_index(archive, index, 0) else {
            if zip_error_code_zip(zip_get_error(archive)) == ZIP_ER_WRONGPASSWD {
                throw StoreBackupError.wrongPassword(name: backupName)
            }
            throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_strerror(archive)))
        }
        zip_fclose(file)
        self.password = password
    }

    /// The NTFS field's 64-bit time first (format 2), then the 32-bit extended timestamp,
    /// then DOS time.
    private func modificationTime(index: UInt64, stat: zip_stat_t) -> Int64 {
        var length: UInt16 = 0
        if let bytes = zip_file_extra_field_get_by_id(archive, index, NTFSTimestamp.fieldID, 0, &length, zip_flags_t(ZIP_FL_CENTRAL)),
            let seconds = NTFSTimestamp.decode(Array(UnsafeBufferPointer(start: bytes, count: Int(length))))
        {
            return seconds
        }
        if let bytes = zip_file_extra_field_get_by_id(archive, index, ZipTimestamp.fieldID, 0, &length, zip_flags_t(ZIP_FL_CENTRAL)),
            let seconds = ZipTimestamp.decode(Array(UnsafeBufferPointer(start: bytes, count: Int(length))))
        {
            return seconds
        }
        return Int64(stat.mtime)
    }

    /// Reads one entry as a stream, through a libzip handle of its own (password set):
    /// `body` gets a function that fills the buffer it is given as far as it can and returns
    /// the count, 0 at the end. Never holds the entry in memory.
    func withEntryStream<T>(_ entry: ArchiveEntry, _ body: (_ read: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> T) throws -> T
    {
        let stream = try openEntryStream(entry)
        return try body(stream.read)
    }

    /// ``withEntryStream(_:_:)`` for a stream that outlives one call (several read side by
    /// side): the handle and the entry close when the stream goes.
    func openEntryStream(_ entry: ArchiveEntry) throws -> EntryStream {
        let handle = try openHandle()
        guard let file = zip_fopen_index(handle, entry.index, 0) else {
            defer { zip_discard(handle) }
            throw StoreBackupError.corruptArchive(name: backupName, reason: "\(entry.path): \(String(cString: zip_strerror(handle)))")
        }
        return EntryStream(handle: handle, file: file, entryPath: entry.path, backupName: backupName)
    }

    /// One entry read in order through a libzip handle of its own (for one thread at a time).
    final class EntryStream {
        private let handle: OpaquePointer
        private let file: OpaquePointer
        private let entryPath: String
        private let backupName: String

        fileprivate init(handle: OpaquePointer, file: OpaquePointer, entryPath: String, backupName: String) {
            self.handle = handle
            self.file = file
            self.entryPath = entryPath
            self.backupName = backupName
        }

        deinit {
            zip_fclose(file)
            zip_discard(handle)
        }

        /// Fills `buffer` as far as it can; returns the count, 0 at the end.
        func read(_ buffer: UnsafeMutableRawBufferPointer) throws -> Int {
            let got = zip_fread(file, buffer.baseAddress, zip_uint64_t(buffer.count))
            guard got >= 0 else {
                throw StoreBackupError.corruptArchive(
                    name: backupName, reason: "\(entryPath): \(String(cString: zip_file_strerror(file)))")
            }
            return Int(got)
        }
    }

    /// Reads a whole entry of at most `limit` bytes. `expectedSize` (already checked against
    /// `limit`) is reserved up front, so a large manifest is not copied as its buffer grows.
    func readSmallEntry(index: UInt64, limit: Int, expectedSize: Int = 0) throws -> Data {
        try checkLocalHeader(index: index)
        guard let file = zip_fopen_index(archive, index, 0) else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_strerror(archive)))
        }
        defer { zip_fclose(file) }
        var data = Data(capacity: min(max(0, expectedSize), limit))
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let got = zip_fread(file, &buffer, zip_uint64_t(buffer.count))
            if got < 0 {
                throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_file_strerror(file)))
            }
            if got == 0 { break }
            data.append(contentsOf: buffer[0..<Int(got)])
            guard data.count <= limit else { throw StoreBackupError.corruptArchive(name: backupName, reason: "entry too large") }
        }
        return data
    }

    /// How many times `pattern` occurs in `data` (non-overlapping).
    static func occurrences(of pattern: [UInt8], in data: Data) -> Int {
        data.withUnsafeBytes { bytes in
            var count = 0
            var index = 0
            let last = bytes.count - pattern.count
            while index <= last {
                if bytes[index] == pattern[0] && pattern.indices.allSatisfy({ bytes[index + $0] == pattern[$0] }) {
                    count += 1
                    index += pattern.count
                } else {
                    index += 1
                }
            }
            return count
        }
    }

    /// What makes a name longer than Linux can create (a part over NAME_MAX, 255 bytes, or
    /// a path over PATH_MAX, 4096 with its NUL), or nil. A store's own `.storebackup` entries
    /// carry ``ArchiveNames/storePrefix`` on top.
    static func lengthProblem(_ raw: UnsafeRawBufferPointer) -> String? {
        let prefix = ArchiveNames.storePrefix.utf8
        // A folder's name ends in "/", which is not part of its path.
        let nameLength = raw.last == UInt8(ascii: "/") ? raw.count - 1 : raw.count
        let pathLength = raw.starts(with: prefix) ? nameLength - prefix.count : nameLength
        if pathLength > Int(PATH_MAX) - 1 { return "a path of \(pathLength) bytes (the limit is \(Int(PATH_MAX) - 1))" }
        var part = 0
        for byte in raw {
            part = byte == UInt8(ascii: "/") ? 0 : part + 1
            if part > Int(NAME_MAX) { return "a name part longer than \(NAME_MAX) bytes (the limit of Linux names)" }
        }
        return nil
    }

    /// True for a non-empty relative path with no empty, "." or ".." parts and no NUL (a
    /// backslash is an ordinary character of a Linux name). One pass over the UTF-8 bytes (every entry of an archive goes through it;
    /// Foundation's substring search cost 20 µs a path).
    static func isSafeRelativePath(_ path: String) -> Bool {
        var partLength = 0
        var partIsDots = true  // the part so far is all dots (".", ".." are refused)
        for byte in path.utf8 {
            switch byte {
            case 0:
                return false
            case UInt8(ascii: "/"):
                if partLength == 0 || (partIsDots && partLength <= 2) { return false }
                partLength = 0
                partIsDots = true
            default:
                partLength += 1
                if byte != UInt8(ascii: ".") { partIsDots = false }
            }
        }
        return partLength > 0 && !(partIsDots && partLength <= 2)
    }

    /// True when a link at `linkPath` pointing to `target` stays inside the root.
    static func isContainedLink(linkPath: String, target: String) -> Bool {
        guard !target.isEmpty, !target.hasPrefix("/") else { return false }
        var parts = linkPath.split(separator: "/").dropLast().map(String.init)
        for part in target.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." {
                guard !parts.isEmpty else { return false }
                parts.removeLast()
            } else {
                parts.append(String(part))
            }
        }
        return true
    }
}
