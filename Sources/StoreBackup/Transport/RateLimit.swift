import Foundation

/// A cap on bytes per second shared by every transfer of one command: S3's parallel
/// parts and every mirror draw from the same allowance, so `--limit-upload 5M` is the
/// command's total, whatever runs in parallel. Transfers pace themselves in libcurl's
/// read and write callbacks: each chunk reserves its slot on a shared timeline and the
/// thread waits until that slot comes (the pause is the limit itself, not a synchronisation).
public final class RateLimit: Sendable {
    /// Bytes per second.
    public let bytesPerSecond: Int64
    /// When the bytes reserved so far are paid for.
    private let paidUntil = Locked<Date>(.distantPast)

    /// The slowest rate accepted: slower, libcurl's stall detection (1 KiB/s for 60 s per
    /// transfer) would take the parts of a paced upload for a dead link.
    public static let minimum: Int64 = 16_000

    /// A cap of `bytesPerSecond`, taken as given: only ``parse(_:option:)`` refuses rates
    /// below ``minimum``.
    public init(bytesPerSecond: Int64) {
        self.bytesPerSecond = bytesPerSecond
    }

    /// Parses a rate as the options write it: bytes per second, with an optional decimal
    /// suffix k (1,000), M (1,000,000) or G (1,000,000,000): `500k`, `5M`, `1.5G`.
    /// `option` names the setting in the error (`--limit-upload`, `limit-upload:`).
    public static func parse(_ text: String, option: String) throws -> RateLimit {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let multipliers: [Character: Double] = ["k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9]
        var number = Substring(trimmed)
        var multiplier = 1.0
        if let last = trimmed.last, let unit = multipliers[last] {
            multiplier = unit
            number = number.dropLast()
        }
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            let value = Double(number), value.isFinite
        else {
            throw StoreBackupError.invalidSchedule(
                reason: "\(option): \"\(text)\" is not a usable rate; "
                    + "use bytes per second with an optional k, M or G (decimal), e.g. 500k or 5M")
        }
        let rate = value * multiplier
        guard rate >= Double(minimum) else {
            throw StoreBackupError.invalidSchedule(
                reason: "\(option): \"\(text)\" is not a usable rate; " + "the slowest rate accepted is 16k (16,000 bytes per second)")
        }
        guard rate < 1e15 else {
            throw StoreBackupError.invalidSchedule(reason: "\(option): \"\(text)\" is not a usable rate; " + "too large")
        }
        return RateLimit(bytesPerSecond: Int64(rate))
    }

    /// Waits until `bytes` more may go, then returns; false when `cancel` was set meanwhile.
    func pace(_ bytes: Int, cancel: CancellationFlag?) -> Bool {
        guard bytes > 0 else { return true }
        let now = Date()
        let slot = paidUntil.withLock { paid -> Date in
            // An idle allowance piles up to a quarter of a second: enough that a thread
            // held up by other work catches up, too little to break the cap visibly.
            let start = max(paid, now.addingTimeInterval(-0.25))
            paid = start.addingTimeInterval(Double(bytes) / Double(bytesPerSecond))
            return paid
        }
        while true {
            if cancel?.isCancelled == true { return false }
            let wait = slot.timeIntervalSinceNow
            if wait <= 0 { return true }
            usleep(UInt32(min(wait, 0.05) * 1_000_000))
        }
    }

    /// The rate as written back to a person: `5M`, `500k`, `16000`.
    public var text: String {
        for (unit, size) in [("G", Int64(1_000_000_000)), ("M", 1_000_000), ("k", 1_000)] where bytesPerSecond % size == 0 {
            return "\(bytesPerSecond / size)\(unit)"
        }
        return "\(bytesPerSecond)"
    }
}
