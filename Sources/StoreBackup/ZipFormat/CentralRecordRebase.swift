import Foundation

/// Moves a central directory record on by `base` bytes: the record of an entry that libzip
/// wrote into an archive starting at offset 0, whose bytes really start `base` bytes into
/// the file (``SegmentedArchive`` lays several libzip archives end to end).
///
/// Only the local header offset changes. When it no longer fits 32 bits it moves into the
/// ZIP64 extra field the way libzip writes one: the field is first (after a WinZip AES
/// field, which libzip puts before it), holds the sizes whose 32-bit fields say 0xFFFFFFFF
/// and then the offset, and the version needed becomes at least 4.5.
enum CentralRecordRebase {
    static let signature: UInt32 = 0x0201_4b50
    static let fixedLength = 46
    private static let zip64FieldID: UInt16 = 0x0001
    private static let winZipAESFieldID: UInt16 = 0x9901

    /// The whole record's length when `bytes` starts with its fixed part, else nil.
    static func recordLength(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count >= fixedLength else { return nil }
        return fixedLength + Int(le16(bytes, 28)) + Int(le16(bytes, 30)) + Int(le16(bytes, 32))
    }

    /// Appends `record` (exactly one whole central header) to `output`, its local header
    /// offset moved on by `base`. Returns whether the record needs ZIP64 (a size or the
    /// offset of 0xFFFFFFFF or more), which decides libzip's end records.
    static func append(_ record: UnsafeRawBufferPointer, movedBy base: Int64, to output: inout [UInt8]) throws -> Bool {
        guard record.count >= fixedLength, le32(record, 0) == signature, recordLength(record) == record.count else {
            throw malformed("a central header is not whole")
        }
        let nameLength = Int(le16(record, 28)), extraLength = Int(le16(record, 30))
        let extraStart = fixedLength + nameLength
        let extra = UnsafeRawBufferPointer(rebasing: record[extraStart..<extraStart + extraLength])
        let size32 = le32(record, 24), compressed32 = le32(record, 20), offset32 = le32(record, 42)

        // The values the ZIP64 field holds, in its order, for the 32-bit fields that say so.
        var zip64Values: [UInt64] = []
        var zip64Range: Range<Int>?
        if size32 == 0xFFFF_FFFF || compressed32 == 0xFFFF_FFFF || offset32 == 0xFFFF_FFFF,
            let found = fieldRange(of: zip64FieldID, in: extra)
        {
            zip64Range = found
            var at = found.lowerBound + 4
            while at + 8 <= found.upperBound {
                zip64Values.append(le64(extra, at))
                at += 8
            }
        }
        var next = 0
        func take(_ field: UInt32) throws -> UInt64? {
            guard field == 0xFFFF_FFFF else { return nil }
            guard zip64Range != nil else { return 0xFFFF_FFFF }
            guard next < zip64Values.count else { throw malformed("a ZIP64 field is short") }
            defer { next += 1 }
            return zip64Values[next]
        }
        let size = try take(size32) ?? UInt64(size32)
        let compressed = try take(compressed32) ?? UInt64(compressed32)
        let offset = try take(offset32) ?? UInt64(offset32)
        guard base >= 0, offset <= UInt64(Int64.max) - UInt64(base) else { throw malformed("an offset overflows") }
        let moved = offset + UInt64(base)
        let needsZip64 = size >= 0xFFFF_FFFF || compressed >= 0xFFFF_FFFF || moved >= 0xFFFF_FFFF

        let start = output.count
        if moved < 0xFFFF_FFFF {
            // The offset still fits where it was (it was not in a ZIP64 field: base >= 0).
            output.append(contentsOf: record)
            put32(&output, start + 42, UInt32(moved))
            return needsZip64
        }

        // The ZIP64 field as libzip would write it for these values.
        var body: [UInt8] = []
        if size32 == 0xFFFF_FFFF { appendLE64(&body, size) }
        if compressed32 == 0xFFFF_FFFF { appendLE64(&body, compressed) }
        appendLE64(&body, moved)
        var newExtra: [UInt8] = []
        if let zip64Range {
            newExtra += extra[..<zip64Range.lowerBound]
            newExtra += fieldHeader(zip64FieldID, body.count) + body
            newExtra += extra[zip64Range.upperBound...]
        } else {
            let insertAt = fieldRange(of: winZipAESFieldID, in: extra).flatMap { $0.lowerBound == 0 ? $0.upperBound : nil } ?? 0
            newExtra += extra[..<insertAt]
            newExtra += fieldHeader(zip64FieldID, body.count) + body
            newExtra += extra[insertAt...]
        }
        guard newExtra.count <= Int(UInt16.max) else { throw malformed("its extra fields grow too long") }
        output.append(contentsOf: record[..<extraStart])
        output += newExtra
        output.append(contentsOf: record[(extraStart + extraLength)...])
        put16(&output, start + 6, max(45, le16(record, 6)))
        put16(&output, start + 30, UInt16(newExtra.count))
        put32(&output, start + 42, 0xFFFF_FFFF)
        return true
    }

    /// The range of the first extra field with `id` (its 4-byte header included).
    private static func fieldRange(of id: UInt16, in extra: UnsafeRawBufferPointer) -> Range<Int>? {
        var at = 0
        while at + 4 <= extra.count {
            let length = Int(le16(extra, at + 2))
            guard at + 4 + length <= extra.count else { return nil }
            if le16(extra, at) == id { return at..<at + 4 + length }
            at += 4 + length
        }
        return nil
    }

    private static func fieldHeader(_ id: UInt16, _ length: Int) -> [UInt8] {
        [UInt8(id & 0xFF), UInt8(id >> 8), UInt8(length & 0xFF), UInt8(length >> 8)]
    }

    private static func malformed(_ reason: String) -> StoreBackupError {
        StoreBackupError.archiveWrite(reason: "libzip's central directory could not be moved: \(reason)")
    }

    static func le16(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
    static func le32(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt32 { UInt32(le16(b, i)) | UInt32(le16(b, i + 2)) << 16 }
    static func le64(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt64 { UInt64(le32(b, i)) | UInt64(le32(b, i + 4)) << 32 }
    private static func put16(_ b: inout [UInt8], _ i: Int, _ v: UInt16) {
        b[i] = UInt8(v & 0xFF)
        b[i + 1] = UInt8(v >> 8)
    }
    private static func put32(_ b: inout [UInt8], _ i: Int, _ v: UInt32) {
        put16(&b, i, UInt16(v & 0xFFFF))
        put16(&b, i + 2, UInt16(v >> 16))
    }
    private static func appendLE64(_ b: inout [UInt8], _ v: UInt64) {
        for shift in stride(from: 0, to: 64, by: 8) { b.append(UInt8((v >> UInt64(shift)) & 0xFF)) }
    }
}
