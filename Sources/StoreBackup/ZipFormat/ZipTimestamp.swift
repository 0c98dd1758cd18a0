import Foundation

/// The "extended timestamp" extra field (id 0x5455, Info-ZIP): modification time as
/// UTC seconds. ZIP's own DOS time has 2-second steps in local time; this field is what
/// makes times exact and independent of the time zone, and unzip/7-Zip read it.
enum ZipTimestamp {
    static let fieldID: UInt16 = 0x5455

    static func encode(modificationTime: Int64) -> [UInt8] {
        let seconds = UInt32(truncatingIfNeeded: max(0, min(modificationTime, Int64(Int32.max))))
        return [0x01] + withUnsafeBytes(of: seconds.littleEndian) { Array($0) }
    }

    static func decode(_ bytes: [UInt8]) -> Int64? {
        guard bytes.count >= 5, bytes[0] & 0x01 != 0 else { return nil }
        let value = UInt32(bytes[1]) | UInt32(bytes[2]) << 8 | UInt32(bytes[3]) << 16 | UInt32(bytes[4]) << 24
        return Int64(Int32(bitPattern: value))
    }
}

/// Unix file-type bits stored in the high half of a ZIP entry's external attributes.
enum UnixMode {
    static let directory: UInt32 = 0o040000
    static let regular: UInt32 = 0o100000
    static let symlink: UInt32 = 0o120000
    static let typeMask: UInt32 = 0o170000
}
