import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Reads a ZIP file's end records and central directory with fixed-size buffers, before
/// libzip opens it, and refuses what libzip would otherwise allocate for or pass on
/// silently: too many entries, a central directory too large, names too long or holding
/// NUL or control bytes (libzip hands names out as C strings, so a NUL would cut them
/// short), and entries whose data overlap (the trick behind "zip bombs" that reuse one
/// compressed stream many times).
struct CentralDirectoryCheck {
    let path: String
    let backupName: String

    private struct Span { var offset: Int64; var end: Int64 }

    /// One central directory record as the check reads it, for a reader that lists the
    /// entries without libzip (``ArchiveReader``). The buffers are valid during the call only.
    struct Record {
        let index: Int64
        /// The name's bytes as stored.
        let name: UnsafeRawBufferPointer
        /// The central header's extra fields.
        let extra: UnsafeRawBufferPointer
        /// The high byte of "version made by": the system whose attributes these are.
        let system: UInt8
        let flags: UInt16
        let method: UInt16
        let dosTime: UInt16
        let dosDate: UInt16
        let crc: UInt32
        let compressedSize: Int64
        let size: Int64
        let externalAttributes: UInt32
        let localOffset: Int64

        var isEncrypted: Bool { flags & 1 != 0 }
        /// General purpose bit 11: the name is UTF-8.
        var isUTF8: Bool { flags & 0x0800 != 0 }
    }

    /// Where the entries and the central directory lie, as the check found them.
    struct Layout {
        /// Each entry's local header offset, in central directory order (libzip's indices).
        var offsets: [Int64]
        var directoryOffset: Int64
    }

    /// Returns each entry's local header offset, in central directory order (libzip's indices).
    @discardableResult
    func run() throws -> [Int64] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreBackupError.io(path: path, operation: "stat", errno: errno) }
        return try run(FileArchiveBytes(descriptor: fd, size: Int64(info.st_size))).offsets
    }

    /// The same check over `bytes` (a file, or a remote backup read in ranges), handing each
    /// central directory record to `visit` as it is read.
    func run(_ bytes: some ArchiveBytes, visit: ((Record) throws -> Void)? = nil) throws -> Layout {
        let fileSize = bytes.size
        let (count, directorySize, directoryOffset) = try readEnd(bytes, fileSize: fileSize)
        guard count <= Int64(ArchiveLimits.maxEntries) else {
            throw damaged("it declares \(count) entries (the limit is \(ArchiveLimits.maxEntries))")
        }
        // Checked before anything is sized by `count`: the claims must agree with the
        // bytes the file really holds.
        guard directoryOffset >= 0, directorySize >= 0, directoryOffset + directorySize <= fileSize else {
            throw damaged("its central directory lies outside the file")
        }
        guard count * ArchiveLimits.minCentralHeaderBytes <= directorySize else {
            throw damaged("it declares \(count) entries but its central directory of \(directorySize) bytes cannot hold them")
        }
        guard directorySize <= ArchiveLimits.maxCentralDirectoryBytes(entries: count) else {
            throw damaged("its central directory is \(directorySize) bytes, too large for \(count) entries")
        }
        // Only now, its size checked: a remote archive fetches the directory in one go.
        try bytes.willRead(directoryOffset..<directoryOffset + directorySize)
        var records: [Span] = []
        records.reserveCapacity(Int(count))
        var offsets: [Int64] = []
        offsets.reserveCapacity(Int(count))
        var position = directoryOffset
        let end = directoryOffset + directorySize
        var window = DirectoryWindow(bytes: bytes, end: end)
        for index in 0..<count {
            guard position + 46 <= end else { throw damaged("its central directory ends early (entry \(index))") }
            let at = try window.cover(position, count: 46, check: self)
            guard window.le32(at) == 0x0201_4b50 else { throw damaged("entry \(index) has no central directory signature") }
            let nameLength = Int(window.le16(at + 28)), extraLength = Int(window.le16(at + 30))
            let commentLength = Int(window.le16(at + 32))
            guard nameLength > 0, nameLength <= ArchiveLimits.maxNameBytes else {
                throw damaged("entry \(index) has a name of \(nameLength) bytes (the limit is \(ArchiveLimits.maxNameBytes))")
            }
            let variableLength = Int64(nameLength + extraLength + commentLength)
            guard position + 46 + variableLength <= end else { throw damaged("its central directory ends early (entry \(index))") }
            var compressedSize = Int64(window.le32(at + 20))
            var localOffset = Int64(window.le32(at + 42))
            var size = Int64(window.le32(at + 24))
            // Read now: covering the name may move the window.
            let system = UInt8(window.le16(at + 4) >> 8), flags = window.le16(at + 8), method = window.le16(at + 10)
            let dosTime = window.le16(at + 12), dosDate = window.le16(at + 14), crc = window.le32(at + 16)
            let externalAttributes = window.le32(at + 38)
            let nameAt = try window.cover(position + 46, count: nameLength + extraLength, check: self)
            // Any byte but NUL is a legal Linux name byte; a NUL would cut the name short
            // for every C function that reads it.
            if window.contains(0, in: nameAt..<nameAt + nameLength) {
                throw damaged("entry \(index) has a name holding a NUL byte")
            }
            if size == 0xFFFF_FFFF || compressedSize == 0xFFFF_FFFF || localOffset == 0xFFFF_FFFF {
                try applyZip64(
                    extra: window.copy(nameAt + nameLength..<nameAt + nameLength + extraLength), size: &size,
                    compressed: &compressedSize, offset: &localOffset, index: index)
            }
            guard localOffset >= 0, localOffset < directoryOffset, compressedSize >= 0 else {
                throw damaged("entry \(index) points outside the archive")
            }
            // The local header holds at least its 30 fixed bytes and the same name.
            records.append(Span(offset: localOffset, end: localOffset + 30 + Int64(nameLength) + compressedSize))
            if let visit {
                try window.withBytes { data in
                    try visit(
                        Record(
                            index: index, name: UnsafeRawBufferPointer(rebasing: data[nameAt..<nameAt + nameLength]),
                            extra: UnsafeRawBufferPointer(rebasing: data[nameAt + nameLength..<nameAt + nameLength + extraLength]),
                            system: system, flags: flags, method: method, dosTime: dosTime, dosDate: dosDate, crc: crc,
                            compressedSize: compressedSize, size: size, externalAttributes: externalAttributes,
                            localOffset: localOffset))
                }
            }
            offsets.append(localOffset)
            position += 46 + variableLength
        }
        records.sort { $0.offset < $1.offset }
        for (previous, next) in zip(records, records.dropFirst()) where next.offset < previous.end {
            throw damaged("two entries share the same bytes")
        }
        if let last = records.last, last.end > directoryOffset {
            throw damaged("an entry runs into the central directory")
        }
        return Layout(offsets: offsets, directoryOffset: directoryOffset)
    }

    /// The central directory read a window at a time (one read per window, not three per
    /// entry), never past its end and never more than ``windowBytes`` at once.
    private struct DirectoryWindow<Bytes: ArchiveBytes> {
        static var windowBytes: Int { 1 << 20 }
        let bytes: Bytes
        let end: Int64
        private var start: Int64 = 0
        private var data: [UInt8] = []

        init(bytes: Bytes, end: Int64) {
            self.bytes = bytes
            self.end = end
        }

        /// Makes sure `count` bytes at `offset` (within the directory) are in the window and
        /// returns where they start in it.
        mutating func cover(_ offset: Int64, count: Int, check: CentralDirectoryCheck) throws -> Int {
            if offset < start || offset + Int64(count) > start + Int64(data.count) {
                let length = Int(min(end - offset, Int64(max(count, Self.windowBytes))))
                data = try check.read(bytes, at: offset, count: length)
                start = offset
            }
            return Int(offset - start)
        }

        func le16(_ i: Int) -> UInt16 { UInt16(data[i]) | UInt16(data[i + 1]) << 8 }
        func le32(_ i: Int) -> UInt32 { UInt32(le16(i)) | UInt32(le16(i + 2)) << 16 }
        func contains(_ byte: UInt8, in range: Range<Int>) -> Bool { data[range].contains(byte) }
        func copy(_ range: Range<Int>) -> [UInt8] { Array(data[range]) }
        func withBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T { try data.withUnsafeBytes(body) }
    }

    /// Entry count, central directory size and offset from the end of central directory
    /// record (and its ZIP64 version when the classic one says 0xFFFF…).
    private func readEnd(_ bytes: some ArchiveBytes, fileSize: Int64) throws -> (Int64, Int64, Int64) {
        let tailLength = Int(min(fileSize, 22 + 65_535))
        guard tailLength >= 22 else { throw damaged("not a readable ZIP archive (too short)") }
        let tail = try read(bytes, at: fileSize - Int64(tailLength), count: tailLength)
        guard let at = stride(from: tailLength - 22, through: 0, by: -1).first(where: { le32(tail, $0) == 0x0605_4b50 }) else {
            throw damaged("not a readable ZIP archive (no end of central directory)")
        }
        var count = Int64(le16(tail, at + 10))
        var size = Int64(le32(tail, at + 12))
        var offset = Int64(le32(tail, at + 16))
        let recordPosition = fileSize - Int64(tailLength) + Int64(at)
        if count == 0xFFFF || size == 0xFFFF_FFFF || offset == 0xFFFF_FFFF, recordPosition >= 20 {
            let locator = try read(bytes, at: recordPosition - 20, count: 20)
            if le32(locator, 0) == 0x0706_4b50 {
                let zip64Position = Int64(le64(locator, 8))
                guard zip64Position >= 0, zip64Position + 56 <= recordPosition else {
                    throw damaged("its ZIP64 end record lies outside the file")
                }
                let record = try read(bytes, at: zip64Position, count: 56)
                guard le32(record, 0) == 0x0606_4b50 else { throw damaged("its ZIP64 end record is missing") }
                count = clamp(le64(record, 32))
                size = clamp(le64(record, 40))
                offset = clamp(le64(record, 48))
            }
        }
        return (count, size, offset)
    }

    /// Replaces 0xFFFFFFFF sizes and offsets by their ZIP64 extra field values, in the order
    /// the format gives them (uncompressed size, compressed size, offset).
    private func applyZip64(extra: [UInt8], size: inout Int64, compressed: inout Int64, offset: inout Int64, index: Int64) throws {
        guard let field = extra.withUnsafeBytes({ ZipExtraFields.body(of: 0x0001, in: $0) }) else {
            // An entry of exactly 0xFFFFFFFF bytes with no ZIP64 field is what it says.
            guard compressed == 0xFFFF_FFFF || offset == 0xFFFF_FFFF else { return }
            throw damaged("entry \(index) lacks its ZIP64 sizes")
        }
        var position = 0
        func next() throws -> Int64 {
            guard position + 8 <= field.count else { throw damaged("entry \(index) has a short ZIP64 field") }
            defer { position += 8 }
            return clamp(le64(field, position))
        }
        if size == 0xFFFF_FFFF { size = try next() }
        if compressed == 0xFFFF_FFFF { compressed = try next() }
        if offset == 0xFFFF_FFFF { offset = try next() }
    }

    fileprivate func read(_ bytes: some ArchiveBytes, at offset: Int64, count: Int) throws -> [UInt8] {
        guard offset >= 0, offset + Int64(count) <= bytes.size else { throw damaged("it ends early") }
        let read = try bytes.read(at: offset, count: count)
        guard read.count == count else { throw damaged("it ends early") }
        return read
    }

    private func damaged(_ reason: String) -> StoreBackupError {
        StoreBackupError.corruptArchive(name: backupName, reason: reason)
    }

    private func clamp(_ value: UInt64) -> Int64 { value > UInt64(Int64.max / 4) ? Int64.max / 4 : Int64(value) }
    private func le16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
    private func le32(_ b: [UInt8], _ i: Int) -> UInt32 { UInt32(le16(b, i)) | UInt32(le16(b, i + 2)) << 16 }
    private func le64(_ b: [UInt8], _ i: Int) -> UInt64 { UInt64(le32(b, i)) | UInt64(le32(b, i + 4)) << 32 }
}
