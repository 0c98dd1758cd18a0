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
    /// Who may still delete a locked backup before its date: an administrator
    /// (``Mode/governance``, the default) or nobody (``Mode/compliance``).
    public var mode: Mode

    /// Locks each new backup for `days` days (give at least 1: it is not checked here) in `mode`.
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
        [
            ("x-amz-object-lock-mode", mode.rawValue),
            ("x-amz-object-lock-retain-until-date", UTCTimestamp.iso8601(retainUntil(from: now))),
        ]
    }
}

/// The S3 Object Lock retention one backup has (``BackupDestination/retention(of:)``).
public struct BackupRetention: Sendable, Equatable {
    /// Whether an administrator may still lift the lock (governance) or nobody can (compliance).
    public var mode: ObjectLockRetention.Mode
    /// Until when the backup cannot be deleted or overwritten.
    public var until: Date

    /// A lock in `mode` until `until`.
    public init(mode: ObjectLockRetention.Mode, until: Date) {
        self.mode = mode
        self.until = until
    }

    /// The body of a PutObjectRetention request setting this retention. The date is
    /// rounded up to the second, so the lock never ends before `until`.
    var requestBody: String {
        let whole = Date(timeIntervalSince1970: until.timeIntervalSince1970.rounded(.up))
        return "<Retention xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Mode>\(mode.rawValue)</Mode>"
            + "<RetainUntilDate>\(UTCTimestamp.iso8601(whole))</RetainUntilDate></Retention>"
    }
}
