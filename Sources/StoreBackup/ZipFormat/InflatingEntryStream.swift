import CISAL
import CZip

#if canImport(Glibc)
import Glibc
#endif

/// Reads one deflated entry in order, inflating it with ISA-L on the calling thread: the
/// entry's raw bytes (still encrypted, for a WinZip AES entry: decrypted here and
/// authenticated with its HMAC) go to ISA-L's streaming inflate instead of libzip's zlib,
/// which inflates several times slower. They are read with `pread` from a backup file on
/// this machine, or else through a libzip handle of the stream's own. A chain restore reads
/// every night's page delta this way beside the unpacking of the full, and a reader that
/// lists its entries without libzip reads the manifest this way.
///
/// Checks what libzip's own read would: never more bytes than the declared size, the CRC-32
/// and the size once the deflate stream ends, no compressed bytes past its end, and for an
/// encrypted entry the authentication code.
final class InflatingEntryStream {
    /// Where the raw bytes come from.
    private enum Source {
        case libzip(handle: OpaquePointer, file: OpaquePointer)
        /// The file and where the entry's data starts in it.
        case local(LocalArchiveFile, dataOffset: Int64)
    }

    private let source: Source
    private let entry: ArchiveEntry
    private let backupName: String
    private let state: UnsafeMutablePointer<inflate_state>
    private let input: UnsafeMutableRawBufferPointer
    /// Compressed (and encrypted) bytes of the entry not read yet, the authentication code aside.
    private var compressedLeft: Int64
    private var compressedOffset: Int64 = 0
    /// Raw bytes read so far (the header and the authentication code included).
    private var rawOffset: Int64 = 0
    private var authenticator: WinZipAuthenticator?
    /// Set by ``startDecrypting(password:)`` for an encrypted entry.
    private var decryptor: WinZipCTR?
    private var produced: Int64 = 0
    private var crc: UInt32 = 0
    private var ended = false

    static let inputSize = 64 << 10

    /// Whether the entry can be read this way (deflated; encrypted only with AES-256).
    static func canRead(_ entry: ArchiveEntry) -> Bool {
        entry.compressionMethod == Int32(ZIP_CM_DEFLATE) && (!entry.isEncrypted || entry.encryptionMethod == UInt16(ZIP_EM_AES_256))
    }

    /// Reads `entry` of `reader`'s archive: from its file when it is on this machine, else
    /// through a handle of its own.
    convenience init(reader: ArchiveReader, entry: ArchiveEntry) throws {
        if let file = reader.localFile {
            try self.init(
                file: file, entry: entry, centralNameLength: reader.centralNameLength(of: entry), backupName: reader.backupName,
                password: reader.password)
            return
        }
        let handle = try reader.openHandle()
        // ZIP_FL_ENCRYPTED: the bytes as stored (salt, verifier, ciphertext, MAC), not decrypted by libzip.
        let flags = entry.isEncrypted ? ZIP_FL_ENCRYPTED : ZIP_FL_COMPRESSED
        guard let file = zip_fopen_index(handle, entry.index, zip_flags_t(flags)) else {
            defer { zip_discard(handle) }
            throw StoreBackupError.corruptArchive(
                name: reader.backupName, reason: "\(entry.path): \(String(cString: zip_strerror(handle)))")
        }
        try self.init(source: .libzip(handle: handle, file: file), entry: entry, backupName: reader.backupName, password: reader.password)
    }

    /// Reads `entry` from `file` with `pread`, its local header checked (``LocalHeader``).
    convenience init(
        file: LocalArchiveFile, entry: ArchiveEntry, centralNameLength: Int?, backupName: String, password: BackupPassword? = nil
    ) throws {
        let offset = try LocalHeader.dataOffset(of: entry, in: file, centralNameLength: centralNameLength, backupName: backupName)
        try self.init(source: .local(file, dataOffset: offset), entry: entry, backupName: backupName, password: password)
    }

    private init(source: Source, entry: ArchiveEntry, backupName: String, password: BackupPassword?) throws {
        self.entry = entry
        self.backupName = backupName
        guard let state = sb_isal_inflate_state_new() else {
            if case .libzip(let handle, let file) = source {
                zip_fclose(file)
                zip_discard(handle)
            }
            throw StoreBackupError.corruptArchive(name: backupName, reason: "out of memory for the ISA-L inflate state")
        }
        self.source = source
        self.state = state
        sb_isal_inflate_stream_reset(state)
        input = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.inputSize, alignment: 16)
        compressedLeft = entry.compressedSize
        // Every property is set from here on: a throw below releases through deinit.
        if entry.isEncrypted { try startDecrypting(password: password) }
    }

    private func startDecrypting(password: BackupPassword?) throws {
        guard let password else { throw StoreBackupError.passwordRequired(name: backupName) }
        guard compressedLeft >= Int64(WinZipAES.overhead) else { throw endsEarly() }
        var header = [UInt8](repeating: 0, count: WinZipAES.headerLength)
        try header.withUnsafeMutableBytes { try readRaw($0) }
        let keys = try WinZipPasswordCheck.keys(password: password, header: header, backupName: backupName)
        authenticator = WinZipAuthenticator(keys: keys)
        decryptor = try WinZipCTR(key: keys.encryption)
        compressedLeft -= Int64(WinZipAES.overhead)
    }

    deinit {
        if case .libzip(let handle, let file) = source {
            zip_fclose(file)
            zip_discard(handle)
        }
        free(state)
        input.deallocate()
    }

    /// Fills `buffer` as far as it can; returns the count, 0 at the end (once every check passed).
    func read(_ buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard !ended, buffer.count > 0 else { return 0 }
        while true {
            if sb_isal_inflate_stream_pending(state) == 0 && compressedLeft > 0 { try refill() }
            var streamEnded: Int32 = 0
            let got = sb_isal_inflate_stream_read(
                state, buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt32(min(buffer.count, Int(UInt32.max))),
                &streamEnded)
            guard got >= 0 else { throw damaged("cannot be decompressed") }
            guard got <= entry.size - produced else { throw damaged("holds more than its declared \(entry.size) bytes") }
            if got > 0 {
                crc = CRC32.update(crc, buffer.baseAddress!, count: Int(got))
                produced += got
            }
            if streamEnded != 0 {
                try finish()
                return Int(got)
            }
            if got > 0 { return Int(got) }
            guard sb_isal_inflate_stream_pending(state) > 0 || compressedLeft > 0 else { throw endsEarly() }
        }
    }

    /// The deflate stream ended: nothing may follow it, and the size, CRC-32 and
    /// authentication code must match.
    private func finish() throws {
        guard sb_isal_inflate_stream_pending(state) == 0, compressedLeft == 0 else {
            throw damaged("has bytes after its compressed data")
        }
        guard produced == entry.size else { throw damaged("holds \(produced) bytes, not its declared \(entry.size)") }
        // WinZip AE-2 entries under 20 bytes carry no CRC (libzip writes 0); the HMAC still holds.
        guard crc == entry.crc || (entry.isEncrypted && entry.size < 20) else {
            throw StoreBackupError.checksumMismatch(name: backupName, entry: entry.path)
        }
        if let authenticator {
            var code = [UInt8](repeating: 0, count: WinZipAES.authenticationCodeLength)
            try code.withUnsafeMutableBytes { try readRaw($0) }
            guard authenticator.isAuthentic(code: code) else {
                throw StoreBackupError.checksumMismatch(name: backupName, entry: entry.path)
            }
        }
        ended = true
    }

    /// Reads the next compressed bytes (decrypted, and fed to the HMAC as stored) into the stream.
    private func refill() throws {
        let count = Int(min(Int64(input.count), compressedLeft))
        let chunk = UnsafeMutableRawBufferPointer(rebasing: input[0..<count])
        try readRaw(chunk)
        if let decryptor {
            authenticator?.update(UnsafeRawBufferPointer(chunk))
            decryptor.apply(to: chunk.baseAddress!, count: count, at: compressedOffset)
        }
        compressedOffset += Int64(count)
        compressedLeft -= Int64(count)
        sb_isal_inflate_stream_feed(state, chunk.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt32(count))
    }

    private func readRaw(_ buffer: UnsafeMutableRawBufferPointer) throws {
        switch source {
        case .libzip(_, let file):
            var got = 0
            while got < buffer.count {
                let count = zip_fread(file, buffer.baseAddress! + got, zip_uint64_t(buffer.count - got))
                guard count > 0 else { throw count < 0 ? damaged(String(cString: zip_file_strerror(file))) : endsEarly() }
                got += Int(count)
            }
        case .local(let file, let dataOffset):
            // Never past the entry's own bytes, whatever asks.
            guard rawOffset + Int64(buffer.count) <= entry.compressedSize,
                try file.readFully(at: dataOffset + rawOffset, into: buffer) == buffer.count
            else { throw endsEarly() }
        }
        rawOffset += Int64(buffer.count)
    }

    private func endsEarly() -> StoreBackupError { damaged("ends early") }

    private func damaged(_ reason: String) -> StoreBackupError {
        .corruptArchive(name: backupName, reason: "\(entry.path) \(reason)")
    }
}
