import Foundation

/// The "extended timestamp" extra field (id 0x5455, Info-ZIP): modification time as
/// UTC seconds. ZIP's own DOS time has 2-second steps in local time; this field is what
/// makes times exact and independent of the time zone, and unzip/7-Zip read it.
enum ZipTimestamp {
    static let fieldID: UInt16 = 0x5455

    /// Signed 32-bit seconds: times outside 1901-2038 are clamped here, and exact in
    /// ``NTFSTimestamp``, which readers take first.
    static func encode(modificationTime: Int64) -> [UInt8] {
        let seconds = UInt32(bitPattern: Int32(clamping: modificationTime))
        return [0x01] + withUnsafeBytes(of: seconds.littleEndian) { Array($0) }
    }

    static func decode(_ bytes: [UInt8]) -> Int64? {
        guard bytes.count >= 5, bytes[0] & 0x01 != 0 else { return nil }
        let value = UInt32(bytes[1]) | UInt32(bytes[2]) << 8 | UInt32(bytes[3]) << 16 | UInt32(bytes[4]) << 24
        return Int64(Int32(bitPattern: value))
    }
}

/// The NTFS extra field (id 0x000a): modification, access and creation times as 64-bit
/// counts of 100 ns since 1601-01-01 UTC. Written beside ``ZipTimestamp`` from format 2 on
/// so that times before 1970 and after 2038 come back to the second; 7-Zip and libarchive
/// read it too. Layout: 4 reserved bytes, then attribute tag 1 with size 24 and the three times.
enum NTFSTimestamp {
    static let fieldID: UInt16 = 0x000a
    /// Seconds from 1601-01-01 to 1970-01-01.
    private static let epochOffset: Int64 = 11_644_473_600
    private static let ticksPerSecond: Int64 = 10_000_000

    static func encode(modificationTime: Int64) -> [UInt8] {
        // Clamped to what 64-bit ticks hold (about years 1601 to 30828).
        let seconds = min(max(modificationTime, -epochOffset), Int64.max / ticksPerSecond - epochOffset)
        let ticks = UInt64((seconds + epochOffset) * ticksPerSecond)
        let time = withUnsafeBytes(of: ticks.littleEndian) { Array($0) }
        return [0, 0, 0, 0, 0x01, 0x00, 24, 0x00] + time + time + time
    }

    static func decode(_ bytes: [UInt8]) -> Int64? {
        var offset = 4
        while offset + 4 <= bytes.count {
            let tag = UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
            let size = Int(UInt16(bytes[offset + 2]) | UInt16(bytes[offset + 3]) << 8)
            offset += 4
            guard offset + size <= bytes.count else { return nil }
            if tag == 1 && size >= 8 {
                var ticks: UInt64 = 0
                for index in (0..<8).reversed() { ticks = ticks << 8 | UInt64(bytes[offset + index]) }
                return Int64(ticks / UInt64(ticksPerSecond)) - epochOffset
            }
            offset += size
        }
        return nil
    }
}

/// Unix file-type bits stored in the high half of a ZIP entry's external attributes.
enum UnixMode {
    static let directory: UInt32 = 0o040000
    static let regular: UInt32 = 0o100000
    static let symlink: UInt32 = 0o120000
    static let fifo: UInt32 = 0o010000
    static let typeMask: UInt32 = 0o170000
}
