import Foundation

/// The end of central directory record (and its ZIP64 record and locator), read from an
/// archive libzip has just written and written the way libzip writes them.
enum ZipEndRecords {
    struct Directory: Equatable {
        var entries: Int64
        var size: Int64
        var offset: Int64
    }

    private static let endSignature: UInt32 = 0x0605_4b50
    private static let zip64EndSignature: UInt32 = 0x0606_4b50
    private static let locatorSignature: UInt32 = 0x0706_4b50
    static let endLength = 22
    static let zip64EndLength = 56
    static let locatorLength = 20

    /// The directory of an archive that libzip wrote with no comment, its last byte at
    /// `length` (offsets relative to the archive's first byte); `read(offset, count)` gives
    /// the archive's bytes.
    static func readUncommented(length: Int64, read: (Int64, Int) throws -> [UInt8]) throws -> Directory {
        guard length >= Int64(endLength) else { throw malformed("it is too short") }
        let end = try read(length - Int64(endLength), endLength)
        try end.withUnsafeBytes { bytes in
            guard CentralRecordRebase.le32(bytes, 0) == endSignature, CentralRecordRebase.le16(bytes, 20) == 0 else {
                throw malformed("no end record where libzip writes it")
            }
        }
        var directory = end.withUnsafeBytes { bytes in
            Directory(
                entries: Int64(CentralRecordRebase.le16(bytes, 10)), size: Int64(CentralRecordRebase.le32(bytes, 12)),
                offset: Int64(CentralRecordRebase.le32(bytes, 16)))
        }
        let locatorAt = length - Int64(endLength + locatorLength)
        if locatorAt >= Int64(zip64EndLength) {
            let locator = try read(locatorAt, locatorLength)
            let zip64At = locator.withUnsafeBytes { bytes -> Int64? in
                guard CentralRecordRebase.le32(bytes, 0) == locatorSignature else { return nil }
                return Int64(clamping: CentralRecordRebase.le64(bytes, 8))
            }
            if let zip64At {
                guard zip64At == locatorAt - Int64(zip64EndLength) else { throw malformed("its ZIP64 end record is misplaced") }
                let record = try read(zip64At, zip64EndLength)
                directory = try record.withUnsafeBytes { bytes in
                    guard CentralRecordRebase.le32(bytes, 0) == zip64EndSignature else {
                        throw malformed("its ZIP64 end record is missing")
                    }
                    return Directory(
                        entries: Int64(clamping: CentralRecordRebase.le64(bytes, 32)),
                        size: Int64(clamping: CentralRecordRebase.le64(bytes, 40)),
                        offset: Int64(clamping: CentralRecordRebase.le64(bytes, 48)))
                }
            }
        }
        guard directory.offset >= 0, directory.size >= 0, directory.offset + directory.size <= length - Int64(endLength) else {
            throw malformed("its central directory lies outside it")
        }
        return directory
    }

    /// The end records following a central directory, as libzip 1.7 writes them: the ZIP64
    /// pair when any record needed ZIP64, the directory starts past 4 GiB or there are more
    /// than 65,535 entries; the classic record with 0xFFFF… where a value does not fit.
    static func make(_ directory: Directory, anyRecordZip64: Bool, comment: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        let entries = UInt64(directory.entries), size = UInt64(directory.size), offset = UInt64(directory.offset)
        if anyRecordZip64 || offset > 0xFFFF_FFFF || entries > 0xFFFF {
            put32(&bytes, zip64EndSignature)
            put64(&bytes, UInt64(zip64EndLength - 12))
            put16(&bytes, 45)
            put16(&bytes, 45)
            put32(&bytes, 0)
            put32(&bytes, 0)
            put64(&bytes, entries)
            put64(&bytes, entries)
            put64(&bytes, size)
            put64(&bytes, offset)
            put32(&bytes, locatorSignature)
            put32(&bytes, 0)
            put64(&bytes, offset + size)
            put32(&bytes, 1)
        }
        put32(&bytes, endSignature)
        put32(&bytes, 0)
        put16(&bytes, UInt16(min(entries, 0xFFFF)))
        put16(&bytes, UInt16(min(entries, 0xFFFF)))
        put32(&bytes, UInt32(min(size, 0xFFFF_FFFF)))
        put32(&bytes, UInt32(min(offset, 0xFFFF_FFFF)))
        put16(&bytes, UInt16(comment.count))
        return bytes + comment
    }

    private static func malformed(_ reason: String) -> StoreBackupError {
        StoreBackupError.archiveWrite(reason: "libzip's archive could not be joined: \(reason)")
    }

    private static func put16(_ b: inout [UInt8], _ v: UInt16) { b += [UInt8(v & 0xFF), UInt8(v >> 8)] }
    private static func put32(_ b: inout [UInt8], _ v: UInt32) {
        put16(&b, UInt16(v & 0xFFFF))
        put16(&b, UInt16(v >> 16))
    }
    private static func put64(_ b: inout [UInt8], _ v: UInt64) {
        put32(&b, UInt32(v & 0xFFFF_FFFF))
        put32(&b, UInt32(v >> 32))
    }
}
