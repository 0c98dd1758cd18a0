import Foundation

/// Whether a committed restore may keep the store it replaced. Keeping costs no write (a
/// rename), but the kept store holds its disk space until it goes: it is kept only when
/// the next restore of a store this size could still unpack beside the live one and leave
/// the reserve ``FreeSpace`` keeps for the app.
enum KeepSpaceRule {
    /// Why the replaced store must not be kept, or nil when it may.
    ///
    /// - Parameters:
    ///   - free: Bytes free now, with the replaced store and the earlier kept one on disk.
    ///   - total: The file system's size.
    ///   - liveBytes: The restored store's size: what the next restore unpacks beside it.
    ///   - earlierBytes: The earlier kept store's size; it goes at this commit whatever is decided.
    static func refusal(free: Int64, total: Int64, liveBytes: Int64, earlierBytes: Int64) -> String? {
        let reserve = FreeSpace.reserve(total: total)
        let freeAfter = free.addingReportingOverflow(earlierBytes).partialValue
        guard freeAfter < liveBytes.addingReportingOverflow(reserve).partialValue else { return nil }
        return "with it kept, \(FreeSpace.describe(max(freeAfter, 0))) would be free, less than the next restore needs "
            + "(\(FreeSpace.describe(liveBytes)) to unpack beside the store and \(FreeSpace.describe(reserve)) kept free for the app)"
    }
}
