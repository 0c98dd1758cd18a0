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
    /// Where the archive's bytes are read: a file, a remote archive, a download arriving.
    let source: ArchiveSource
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
    /// The archive's own files besides the manifest and the page deltas (the format marker,
    /// format 3's page maps): nothing restores them, so only verify reads them, for their CRCs
    /// (``checkOwnEntries(cancel:)``).
    private(set) var ownEntries: [ArchiveEntry] = []
    /// The password, once checked; nil for an archive without encrypted entries.
    private(set) var password: BackupPassword?
    /// Nil once ``release()`` let it go, and until first used when the entries were listed
    /// without libzip (``idleHandle``).
    private var archive: OpaquePointer?
    /// Whether ``release()`` let the reader go.
    private var released = false
    /// Held while ``idleHandle`` opens the handle.
    private let handleLock = NSLock()
    /// Each entry's name length in the central directory, by libzip index, when the entries
    /// were listed without libzip (whose `ZIP_CHECKCONS` compares the local headers
    /// otherwise); see ``LocalHeader``. Empty otherwise.
    private(set) var centralNameLengths: [UInt16] = []
    /// Each entry's local header offset, by libzip index (from ``CentralDirectoryCheck``):
    /// copied into the entries, then let go (8 bytes an entry).
    private var localHeaderOffsets: [Int64]
    /// Drops the archive's pages once read (nil when the file cannot be opened again).
    let pageCache: ArchivePageCache?

    /// The archive when it is a complete file on this machine, for reading small entries
    /// without libzip (see `LocalEntryReader`); nil for a remote or arriving archive.
    var localFile: LocalArchiveFile? { source.localFile }

    /// Opens the archive from `source`. If it is encrypted, asks `passwords` for the password
    /// and checks it on the manifest (or the first encrypted entry) before anything else is
    /// read: `passwordRequired` without one, `wrongPassword` when it does not fit.
    /// An unencrypted file is listed from its central directory without libzip
    /// (``readEntriesWithoutLibzip(_:)``), unless `listsThroughLibzip` (which makes the
    /// same list, with libzip's consistency check of every local header up front).
    init(_ source: ArchiveSource, backupName: String, passwords: PasswordProvider? = nil, listsThroughLibzip: Bool = false) throws {
        self.source = source
        self.backupName = backupName
        localHeaderOffsets = []
        pageCache = source.makePageCache()
        // Counts, sizes and names are checked with fixed buffers before anything is sized by them.
        if let localFile, !listsThroughLibzip, try readEntriesWithoutLibzip(localFile) { return }
        localHeaderOffsets = try source.checkCentralDirectory(backupName: backupName)
        archive = try source.openHandle(backupName: backupName)
        // If this throws, deinit still runs (every property is set) and discards the handle.
        try readEntries(passwords: passwords)
    }

    /// Opens the complete backup file at `path` (``ArchiveSource/file(path:_:)``).
    convenience init(path: String, backupName: String, passwords: PasswordProvider? = nil, listsThroughLibzip: Bool = false) throws {
        try self.init(
            .file(path: path, LocalArchiveFile(path: path)), backupName: backupName, passwords: passwords,
            listsThroughLibzip: listsThroughLibzip)
    }

    /// Opens a remote archive through ranged reads (``ArchiveSource/ranged(_:)``).
    convenience init(ranged: RangedArchive, backupName: String, passwords: PasswordProvider? = nil) throws {
        try self.init(.ranged(ranged), backupName: backupName, passwords: passwords)
    }

    /// Opens a download still arriving (``ArchiveSource/arriving(_:)``).
    convenience init(arriving: ArrivingArchive, backupName: String, passwords: PasswordProvider? = nil) throws {
        try self.init(.arriving(arriving), backupName: backupName, passwords: passwords)
    }

    /// libzip's consistency check of the complete archive at `path` (every local header
    /// against the central directory), as a file's handles make it (``ArchiveSource/openCompleteFile(path:backupName:)``).
    static func checkConsistency(path: String, backupName: String) throws {
        zip_discard(try ArchiveSource.openCompleteFile(path: path, backupName: backupName))
    }

    /// Another handle on the same archive, for another thread, with the password set.
    func openHandle() throws -> OpaquePointer {
        let handle = try source.openHandle(backupName: backupName)
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
    /// Opened on first use when the entries were listed without libzip.
    var idleHandle: OpaquePointer {
        get throws {
            handleLock.lock()
            defer { handleLock.unlock() }
            if let archive { return archive }
            precondition(!released, "the reader of \(backupName) was released")
            let opened = try source.openHandle(backupName: backupName)
            archive = opened
            return opened
        }
    }

    /// `entry`'s name length in the central directory, when the entries were listed
    /// without libzip (see ``centralNameLengths``).
    func centralNameLength(of entry: ArchiveEntry) -> Int? {
        Int(entry.index) < centralNameLengths.count ? Int(centralNameLengths[Int(entry.index)]) : nil
    }

    deinit { if let archive { zip_discard(archive) } }

    /// Lets go of what the reader holds in memory (its libzip handle with its copy of the
    /// central directory, the entry list, the manifest, the page deltas) once nothing will
    /// read the archive again: a chain restore keeps each of its backups only while a later
    /// step needs it. Streams opened before (``openEntryStream(_:)``) have handles of their own.
    func release() {
        if let archive { zip_discard(archive) }
        archive = nil
        released = true
        centralNameLengths = []
        entries = []
        manifest = nil
        pageDeltas = [:]
        // They were many small blocks spread through the heap, which glibc keeps resident
        // once free: what comes next (the reload's scan of the restored tree, a listing)
        // would grow beside them instead of in their pages. Trimming returns the free pages.
        malloc_trim(0)
    }

    /// libzip's zip_open is not safe to call from several threads at once (GUIDE §5).
    static let openLock = NSLock()

    /// One entry as listed, from libzip's description or from its central directory record.
    private struct ListedEntry {
        let index: UInt64
        /// Valid during ``list(_:into:)`` only.
        let rawName: UnsafeRawBufferPointer
        let size: Int64
        let compressedSize: Int64
        let method: Int32
        let crc: UInt32
        let encryptionMethod: UInt16
        /// The system's attributes: the Unix mode in the high 16 bits, when `system` is Unix.
        let system: UInt8
        let attributes: UInt32
        let localOffset: Int64
        let modificationTime: () -> Int64
    }

    /// What the listing gathers beside the entries.
    private struct Listing {
        var seen = Set<String>()
        var nameBytes = 0
        var manifest: ArchiveEntry?
        var encryptedIndex: UInt64?
    }

    /// Lists the entries through libzip's handle (a remote, arriving or encrypted archive).
    private func readEntries(passwords: PasswordProvider?) throws {
        let count = zip_get_num_entries(archive, 0)
        guard count >= 0 else { throw StoreBackupError.corruptArchive(name: backupName, reason: "cannot read the entry list") }
        markerFormat = try checkFormatMarkers(count: UInt64(count))
        // Grown by doubling, the list would hold two copies at once for a moment.
        entries.reserveCapacity(Int(min(UInt64(count), UInt64(ArchiveLimits.maxEntries))))
        var listing = Listing()
        listing.seen.reserveCapacity(Int(min(UInt64(count), UInt64(ArchiveLimits.maxEntries))))
        for index in 0..<UInt64(count) {
            var stat = zip_stat_t()
            // ZIP_FL_ENC_RAW: the name's bytes as stored, not converted from CP437 (a name
            // that is not UTF-8 is a Linux name like any other).
            guard zip_stat_index(archive, index, zip_flags_t(ZIP_FL_ENC_RAW), &stat) == 0, let rawName = stat.name else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(index) is unreadable")
            }
            var system: UInt8 = 0
            var attributes: UInt32 = 0
            zip_file_get_external_attributes(archive, index, 0, &system, &attributes)
            try list(
                ListedEntry(
                    index: index, rawName: UnsafeRawBufferPointer(start: rawName, count: strlen(rawName)),
                    size: Int64(clamping: stat.size), compressedSize: Int64(clamping: stat.comp_size),
                    method: Int32(stat.comp_method), crc: stat.crc, encryptionMethod: stat.encryption_method, system: system,
                    attributes: attributes,
                    localOffset: index < UInt64(localHeaderOffsets.count) ? localHeaderOffsets[Int(index)] : 0,
                    modificationTime: { self.modificationTime(index: index, stat: stat) }),
                into: &listing)
        }
        localHeaderOffsets = []
        // Only needed to find duplicates: let it go before the manifest is decoded.
        listing.seen = []
        try finishListing(listing, count: Int(count), passwords: passwords, open: readThroughLibzip)
    }

    /// The manifest entry read through the reader's libzip handle.
    private func readThroughLibzip(_ manifest: ArchiveEntry) throws -> ManifestRead {
        try checkLocalHeader(index: manifest.index)
        let archive = try idleHandle
        guard let file = zip_fopen_index(archive, manifest.index, 0) else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_strerror(archive)))
        }
        let read = { [backupName] (buffer: UnsafeMutableRawBufferPointer) throws -> Int in
            let got = zip_fread(file, buffer.baseAddress, zip_uint64_t(buffer.count))
            guard got >= 0 else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: String(cString: zip_file_strerror(file)))
            }
            return Int(got)
        }
        return (read: read, close: { zip_fclose(file) })
    }

    /// Lists the entries of an unencrypted backup file on this machine from its central
    /// directory, as ``CentralDirectoryCheck`` reads it, without libzip: libzip's handle holds
    /// its own copy of the directory, about 390 bytes an entry, the largest memory per entry of
    /// a restore. The handle is opened later only if something needs it (``idleHandle``).
    /// Returns false, having listed nothing, for an archive with encrypted entries.
    private func readEntriesWithoutLibzip(_ file: LocalArchiveFile) throws -> Bool {
        let check = CentralDirectoryCheck(path: file.path, backupName: backupName)
        var leftToLibzip = false
        var announced = 1
        let layout = try check.run(FileArchiveBytes(descriptor: file.descriptor, size: file.size)) { record in
            // libzip decrypts, and refuses names it finds inconsistent: it says so itself.
            leftToLibzip = leftToLibzip || record.isEncrypted || (record.isUTF8 && !Self.libzipAcceptsUTF8(record.name))
            if let format = Manifest.format(ofMarkerEntry: record.name) { announced = max(announced, format) }
        }
        guard !leftToLibzip else { return false }
        if announced > Manifest.newestReadableFormat {
            throw StoreBackupError.newerFormat(name: backupName, format: announced, newestReadable: Manifest.newestReadableFormat)
        }
        markerFormat = announced
        let count = layout.offsets.count
        entries.reserveCapacity(count)
        centralNameLengths.reserveCapacity(count)
        var listing = Listing()
        // Sized once: grown by doubling, rehashing every path took a tenth of the listing.
        listing.seen.reserveCapacity(count)
        // The directory again, now that the names' format is known (a few milliseconds).
        _ = try check.run(FileArchiveBytes(descriptor: file.descriptor, size: file.size)) { record in
            self.centralNameLengths.append(UInt16(record.name.count))
            try self.list(
                ListedEntry(
                    index: UInt64(record.index), rawName: record.name, size: record.size, compressedSize: record.compressedSize,
                    method: Int32(record.method), crc: record.crc, encryptionMethod: UInt16(ZIP_EM_NONE), system: record.system,
                    attributes: record.externalAttributes, localOffset: record.localOffset,
                    modificationTime: { Self.modificationTime(extra: record.extra, dosTime: record.dosTime, dosDate: record.dosDate) }),
                into: &listing)
        }
        listing.seen = []
        try finishListing(listing, count: count, passwords: nil) { manifest in
            guard InflatingEntryStream.canRead(manifest) else { return try readThroughLibzip(manifest) }
            let stream = try InflatingEntryStream(reader: self, entry: manifest)
            return (read: { try stream.read($0) }, close: {})
        }
        return true
    }

    /// Whether libzip takes `name`, flagged as UTF-8, as UTF-8: printable ASCII, tab, line
    /// feed and carriage return, and well-formed sequences of 2 to 4 bytes (libzip 1.7's
    /// `_zip_guess_encoding`, which makes `zip_open` refuse the archive as inconsistent
    /// otherwise).
    static func libzipAcceptsUTF8(_ name: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        while index < name.count {
            let byte = name[index]
            if (byte > 31 && byte < 128) || byte == 0x0D || byte == 0x0A || byte == 0x09 {
                index += 1
                continue
            }
            let following: Int
            switch byte {
            case _ where byte & 0xE0 == 0xC0: following = 1
            case _ where byte & 0xF0 == 0xE0: following = 2
            case _ where byte & 0xF8 == 0xF0: following = 3
            default: return false
            }
            guard index + following < name.count else { return false }
            for next in 1...following where name[index + next] & 0xC0 != 0x80 { return false }
            index += following + 1
        }
        return true
    }

    /// Judges one entry's name and adds it to ``entries`` (or notes it as the manifest, a
    /// page delta or one of the archive's own entries).
    private func list(_ item: ListedEntry, into listing: inout Listing) throws {
        let name = EscapedName.escape(item.rawName)
        if let problem = Self.lengthProblem(item.rawName) {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "entry \(name.prefix(300)) has \(problem)")
        }
        listing.nameBytes += item.rawName.count
        if item.encryptionMethod != UInt16(ZIP_EM_NONE) && listing.encryptedIndex == nil { listing.encryptedIndex = item.index }
        let isDirectoryName = name.hasSuffix("/")
        let entryName = isDirectoryName ? String(name.dropLast()) : name
        if name == Manifest.archivePath {
            listing.manifest = ArchiveEntry(
                index: item.index, path: name, kind: .file, permissions: 0o600, modificationTime: 0, size: item.size,
                compressedSize: item.compressedSize, compressionMethod: item.method, crc: item.crc,
                encryptionMethod: item.encryptionMethod, archiveOffset: item.localOffset)
            return
        }
        guard Self.isSafeRelativePath(entryName) else {
            throw StoreBackupError.unsafeArchiveEntry(name: backupName, entry: name)
        }
        let path: String
        switch ArchiveNames.storePath(forEntryName: entryName, format: markerFormat) {
        case .store(let storePath): path = storePath
        case .own:
            if !isDirectoryName {
                ownEntries.append(
                    ArchiveEntry(
                        index: item.index, path: name, kind: .file, permissions: 0o600, modificationTime: 0, size: item.size,
                        compressedSize: item.compressedSize, compressionMethod: item.method, crc: item.crc,
                        encryptionMethod: item.encryptionMethod, archiveOffset: item.localOffset))
            }
            return
        case .pageDelta(let database):
            guard !isDirectoryName, pageDeltas[database] == nil else {
                throw StoreBackupError.corruptArchive(name: backupName, reason: "the page delta of \(database) appears twice")
            }
            pageDeltas[database] = ArchiveEntry(
                index: item.index, path: database, kind: .file, permissions: 0o600, modificationTime: 0, size: item.size,
                compressedSize: item.compressedSize, compressionMethod: item.method, crc: item.crc,
                encryptionMethod: item.encryptionMethod, archiveOffset: item.localOffset)
            return
        case .unknown: throw StoreBackupError.unsafeArchiveEntry(name: backupName, entry: name)
        }
        guard listing.seen.insert(path).inserted else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "\(path) appears twice")
        }
        let unixMode: UInt32? = item.system == UInt8(ZIP_OPSYS_UNIX) && item.attributes >> 16 != 0 ? item.attributes >> 16 : nil
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
                index: item.index, path: path, kind: kind, permissions: permissions, modificationTime: item.modificationTime(),
                size: item.size, compressedSize: item.compressedSize, compressionMethod: item.method, crc: item.crc,
                encryptionMethod: item.encryptionMethod, archiveOffset: item.localOffset))
    }

    /// A read function over the manifest entry's bytes, and what closes it.
    private typealias ManifestRead = (read: (UnsafeMutableRawBufferPointer) throws -> Int, close: () -> Void)

    /// Checks the password, then reads and decodes the manifest through `open` (as a stream,
    /// row by row: the text is never held whole), and checks the page deltas against it.
    private func finishListing(
        _ listing: Listing, count: Int, passwords: PasswordProvider?,
        open: (ArchiveEntry) throws -> ManifestRead
    ) throws {
        let (nameBytes, manifestEntry, encryptedIndex) = (listing.nameBytes, listing.manifest, listing.encryptedIndex)
        if let encryptedIndex {
            try checkPassword(passwords, onEntry: manifestEntry.flatMap { $0.isEncrypted ? $0.index : nil } ?? encryptedIndex)
        }
        guard let manifestEntry else { return }
        var manifestLimit = ArchiveLimits.maxManifestBytes(entries: count, nameBytes: nameBytes)
        // A format-3 manifest may list files that live in earlier backups of its chain.
        if markerFormat >= 3 { manifestLimit = max(manifestLimit, ArchiveLimits.maxChainManifestBytes) }
        guard manifestEntry.size <= Int64(manifestLimit) else {
            throw StoreBackupError.corruptArchive(
                name: backupName, reason: "its manifest is larger than \(manifestLimit) bytes, too large for \(count) entries")
        }
        // The rows are bounded by the entries as they come (one row per entry, and one per database).
        let rowLimit = markerFormat >= 3 ? max(entries.count, ArchiveLimits.maxChainManifestRows) : entries.count
        let stream = try open(manifestEntry)
        defer { stream.close() }
        do {
            (manifest, manifestSHA256) = try ManifestStreamDecoder.decode(
                maxBytes: Int(manifestLimit), maxRows: 2 * rowLimit + 2, entries: entries, read: stream.read)
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

    /// ``modificationTime(index:stat:)`` from a central directory record's extra fields, and
    /// its DOS time read as libzip reads it (local time, daylight saving as `mktime` decides).
    static func modificationTime(extra: UnsafeRawBufferPointer, dosTime: UInt16, dosDate: UInt16) -> Int64 {
        if let body = ZipExtraFields.body(of: NTFSTimestamp.fieldID, in: extra), let seconds = NTFSTimestamp.decode(body) { return seconds }
        if let body = ZipExtraFields.body(of: ZipTimestamp.fieldID, in: extra), let seconds = ZipTimestamp.decode(body) { return seconds }
        var time = tm()
        time.tm_isdst = -1
        time.tm_year = Int32((dosDate >> 9) & 127) + 1980 - 1900
        time.tm_mon = Int32((dosDate >> 5) & 15) - 1
        time.tm_mday = Int32(dosDate & 31)
        time.tm_hour = Int32((dosTime >> 11) & 31)
        time.tm_min = Int32((dosTime >> 5) & 63)
        time.tm_sec = Int32((dosTime << 1) & 62)
        return Int64(mktime(&time))
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
        let archive = try idleHandle
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
