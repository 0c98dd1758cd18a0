import Foundation

/// Turns a `--to`/`--from` value into a destination. Local paths and `file://` URLs
/// are local folders; other schemes are added here as their backends arrive.
public enum DestinationResolver {
    /// The default when no destination is given: `$STOREBACKUP_DESTINATION`, else
    /// `$XDG_DATA_HOME/storebackup/backups`, else `~/.local/share/storebackup/backups`.
    public static func defaultFolder(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let explicit = environment["STOREBACKUP_DESTINATION"], !explicit.isEmpty { return explicit }
        if let data = environment["XDG_DATA_HOME"], !data.isEmpty { return data + "/storebackup/backups" }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return home + "/.local/share/storebackup/backups"
    }

    /// Local paths and `file://` URLs are folders; `s3://` goes to S3 (or a compatible
    /// endpoint), `webdav(s)://` to a WebDAV server, `sftp://` to an SSH server,
    /// `dropbox:///PATH` to a folder in Dropbox.
    /// Remote destinations are wrapped in `RetryingDestination`.
    public static func resolve(_ value: String?, options: DestinationOptions = DestinationOptions()) throws -> any BackupDestination {
        let environment = options.environment
        let text = value ?? defaultFolder(environment: environment)
        if text.hasPrefix("file://") {
            guard let url = URL(string: text), url.host == nil || url.host == "" || url.host == "localhost" else {
                throw StoreBackupError.invalidDestination(
                    url: text, reason: "a file:// URL needs an absolute path, e.g. file:///var/backups")
            }
            try refuseObjectLock("a local folder", options)
            return LocalFolderDestination(folder: url.path)
        }
        if let schemeEnd = text.range(of: "://") {
            let scheme = String(text[..<schemeEnd.lowerBound]).lowercased()
            switch scheme {
            case "s3":
                try checkBucketAuthority(text)
                return RetryingDestination(
                    try S3Destination.make(url: text, options: options), policy: options.retry, logger: options.logger)
            case "webdav", "webdavs":
                try refuseObjectLock("WebDAV", options)
                return RetryingDestination(
                    try WebDAVDestination.make(url: text, options: options), policy: options.retry, logger: options.logger)
            case "sftp":
                try refuseObjectLock("SFTP", options)
                return RetryingDestination(
                    try SFTPDestination.make(url: text, options: options), policy: options.retry, logger: options.logger)
            case "dropbox":
                try refuseObjectLock("Dropbox", options)
                return RetryingDestination(
                    try DropboxDestination.make(url: text, options: options), policy: options.retry, logger: options.logger)
            default:
                throw StoreBackupError.invalidDestination(
                    url: RemoteURL.redacted(text),
                    reason:
                        "the \(scheme):// scheme is not supported (supported: a local path, file://, s3://, webdav://, webdavs://, sftp://, dropbox:///PATH)"
                )
            }
        }
        guard !text.isEmpty else { throw StoreBackupError.invalidDestination(url: text, reason: "empty path") }
        try refuseObjectLock("a local folder", options)
        return LocalFolderDestination(folder: text)
    }

    /// Only S3 can make a backup immutable; elsewhere `--retain-days` would be a promise
    /// nothing keeps, so it is an error.
    static func refuseObjectLock(_ kind: String, _ options: DestinationOptions) throws {
        guard let lock = options.objectLock else { return }
        throw StoreBackupError.invalidDestination(
            url: "--retain-days \(lock.days)",
            reason: "\(kind) cannot lock backups; Object Lock needs S3 (drop --retain-days / retain-days: for this destination)")
    }

    /// `s3://BUCKET/PREFIX` names a bucket only: keys come from the environment or the
    /// credentials file, the endpoint from `--s3-endpoint`. User info (`AKID:SECRET@`) or a
    /// port would otherwise be ignored silently; refuse them, with the user info blanked out
    /// so a secret typed there never reaches a message or a log.
    static func checkBucketAuthority(_ text: String) throws {
        guard let schemeEnd = text.range(of: "://") else { return }
        let rest = text[schemeEnd.upperBound...]
        let authority = rest[..<(rest.firstIndex(of: "/") ?? rest.endIndex)]
        if authority.contains("@") {
            throw StoreBackupError.invalidDestination(
                url: RemoteURL.withoutUserInfo(text),
                reason:
                    "an s3:// URL takes no user name or keys; give them with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a credentials file")
        }
        if authority.contains(":") {
            throw StoreBackupError.invalidDestination(
                url: text, reason: "an s3:// URL names a bucket, not a host and port", remedy: .giveS3Endpoint)
        }
    }
}
