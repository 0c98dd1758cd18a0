import Foundation

/// How long new backups on S3 stay immutable (S3 Object Lock): `--retain-days N`,
/// `--retain-mode`, or `retain-days:`/`retain-mode:` in the configuration. Each backup's
/// PUT (or CreateMultipartUpload) carries a retain-until date N days ahead, so a stolen
/// credential cannot delete or overwrite it before then. Only S3 can lock; other
/// destinations refuse the setting rather than pretend.
public struct ObjectLockRetention: Sendable, Equatable {
    /// S3's two retention modes.
    public enum Mode: String, Sendable, Equatable {
        /// Users with `s3:BypassGovernanceRetention` may still delete: the default, so a
        /// mistake can be undone by an administrator.
        case governance = "GOVERNANCE"
        /// Nobody, not even the account's root user, can delete before the date.
        case compliance = "COMPLIANCE"

        /// `governance` or `compliance`, in any case; nil otherwise.
        public init?(text: String) {
            self.init(rawValue: text.uppercased())
        }
    }

    /// Days each new backup stays locked (≥ 1).
    public var days: Int
    public var mode: Mode

    public init(days: Int, mode: Mode = .governance) {
        self.days = days
        self.mode = mode
    }

    /// The retain-until date for a backup uploaded at `now`.
    func retainUntil(from now: Date = Date()) -> Date {
        now.addingTimeInterval(Double(days) * 86_400)
    }

    /// The request headers that lock an object being written.
    func headers(now: Date = Date()) -> [(String, String)] {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return [
            ("x-amz-object-lock-mode", mode.rawValue),
            ("x-amz-object-lock-retain-until-date", formatter.string(from: retainUntil(from: now))),
        ]
    }
}
