import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Refuses an extraction that would fill the file system the live store sits on.
///
/// The app keeps running while restore unpacks beside its store; running its disk out of
/// space would hurt it more than a refused restore. What must fit: the archive's declared
/// sizes (each entry is also cut off at its declared size while writing), with a reserve
/// of ``ArchiveLimits/reserveFraction`` of the file system or
/// ``ArchiveLimits/minimumReserveBytes``, whichever is larger.
enum FreeSpace {
    static func check(needed: Int64, in directory: String, backupName: String) throws {
        let (free, total) = try volume(of: directory)
        let reserve = reserve(total: total)
        guard needed <= free - reserve else {
            throw StoreBackupError.restoreRefused(
                reason:
                    "backup \"\(backupName)\" needs \(describe(needed)) but \(directory) has \(describe(free)) free, and \(describe(reserve)) must stay free for the app; free some space first"
            )
        }
    }

    /// The bytes an unprivileged writer may still use on `directory`'s file system, and its size.
    static func volume(of directory: String) throws -> (free: Int64, total: Int64) {
        var info = statvfs()
        guard statvfs(directory, &info) == 0 else { throw StoreBackupError.io(path: directory, operation: "statvfs", errno: errno) }
        let blockSize = Int64(info.f_frsize)
        let available = Int64(clamping: UInt64(info.f_bavail)).multipliedReportingOverflow(by: blockSize)
        let size = Int64(clamping: UInt64(info.f_blocks)).multipliedReportingOverflow(by: blockSize)
        return (available.overflow ? Int64.max : available.partialValue, size.overflow ? Int64.max : size.partialValue)
    }

    /// What must stay free on a file system of `total` bytes for the app.
    static func reserve(total: Int64) -> Int64 {
        max(Int64(Double(total) * ArchiveLimits.reserveFraction), ArchiveLimits.minimumReserveBytes)
    }

    /// "1.5 GiB (1610612736 bytes)".
    static func describe(_ bytes: Int64) -> String {
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
        var value = Double(bytes) / 1024
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return String(format: "%.1f %@ (%lld bytes)", value, units[unit], bytes)
    }
}
