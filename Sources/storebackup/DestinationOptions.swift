import ArgumentParser
import StoreBackup

/// Shared by commands that read or write backups.
struct DestinationOption: ParsableArguments {
    @Option(
        name: [.customLong("to"), .customLong("from")],
        help: ArgumentHelp(
            "Where backups live: a folder path or file:// URL, s3://BUCKET/PREFIX, webdav(s)://HOST[:PORT]/PATH, sftp://USER@HOST[:PORT]/PATH, or dropbox:///PATH (see `storebackup auth dropbox`).",
            valueName: "destination"))
    var destinations: [String] = []

    @OptionGroup var connection: ConnectionOption

    /// The one destination given, or nil for the default (see `resolve()`).
    var destination: String? { destinations.last }
    var caFile: String? { connection.caFile }
    var insecure: Bool { connection.insecure }
    var options: DestinationOptions { connection.options }

    /// The destination; more than one --to/--from is an error (only `restore` takes several).
    func resolve() throws -> any BackupDestination {
        if destinations.count > 1 {
            Terminal.fail(
                StoreBackupError.invalidDestination(
                    url: "--to/--from", reason: "this command takes one destination; \(destinations.count) were given"))
        }
        return connection.resolve(destination)
    }
}

/// How to reach remote destinations: endpoints, TLS, SSH keys, credentials.
struct ConnectionOption: ParsableArguments {
    @Option(
        name: .customLong("s3-endpoint"),
        help: ArgumentHelp("S3-compatible endpoint URL (default: AWS_ENDPOINT_URL, else AWS); path-style addressing.", valueName: "url"))
    var s3Endpoint: String?

    @Option(
        name: .customLong("ca-file"),
        help: ArgumentHelp("Also trust the CAs in this PEM file (default: STOREBACKUP_CA_FILE).", valueName: "file"))
    var caFile: String?

    @Flag(help: "Do not verify TLS certificates (dangerous; prints a warning).")
    var insecure = false

    @Option(
        name: .customLong("ssh-key"),
        help: ArgumentHelp("SSH private key for sftp:// (default ~/.ssh/id_ed25519, then ~/.ssh/id_rsa).", valueName: "file"))
    var sshKey: String?

    @Option(
        name: .customLong("known-hosts"),
        help: ArgumentHelp("known_hosts file for sftp:// (default ~/.ssh/known_hosts); unknown hosts are refused.", valueName: "file"))
    var knownHosts: String?

    @Option(
        name: .customLong("credentials"),
        help: ArgumentHelp("Credentials file (NAME=value lines, chmod 600); takes precedence over the environment.", valueName: "file"))
    var credentials: String?

    @Option(
        name: .customLong("retry-for"),
        help: ArgumentHelp(
            "How long each operation on a remote destination (an upload, a download, a listing, a delete) may keep retrying what its service calls transient: network errors, timeouts, 408, 429, 5xx, S3 SlowDown, Dropbox too_many_write_operations; with growing, jittered pauses and the server's Retry-After. A duration: 90s, 5m, 1h; 0 retries nothing (default: retry-for: in the configuration, else STOREBACKUP_RETRY_FOR, else 5m).",
            valueName: "duration"),
        transform: { text in
            do { return try DurationText.parseSeconds(text) } catch { throw ValidationError("--retry-for: \(error)") }
        })
    var retryFor: Double?

    @Option(
        name: .customLong("limit-upload"),
        help: ArgumentHelp(
            "Cap on bytes per second sent to remote destinations, the total of parallel parts and mirrors: 500k, 5M, 1G (decimal: 5M is 5,000,000 B/s; default: limit-upload: in the configuration, else none).",
            valueName: "rate"),
        transform: { text in
            do { return try RateLimit.parse(text, option: "--limit-upload") } catch { throw ValidationError("\(error)") }
        })
    var limitUpload: RateLimit?

    @Option(
        name: .customLong("limit-download"),
        help: ArgumentHelp(
            "Cap on bytes per second received from remote destinations, as --limit-upload (default: limit-download: in the configuration, else none).",
            valueName: "rate"),
        transform: { text in
            do { return try RateLimit.parse(text, option: "--limit-download") } catch { throw ValidationError("\(error)") }
        })
    var limitDownload: RateLimit?

    @Option(
        name: .customLong("retain-days"),
        help: ArgumentHelp(
            "Lock each new backup for this many days with S3 Object Lock, so nobody (no stolen key) can delete it before then; the bucket must have Object Lock enabled. Other destinations refuse it (default: retain-days: in the configuration).",
            valueName: "days"),
        transform: { text in
            guard let days = Int(text), days >= 1 else {
                throw ValidationError("--retain-days: \"\(text)\" is not a whole number of days ≥ 1")
            }
            return days
        })
    var retainDays: Int?

    @Option(
        name: .customLong("retain-mode"),
        help: ArgumentHelp(
            "S3 Object Lock mode for --retain-days: governance (default; users allowed to bypass governance can still delete) or compliance (nobody can).",
            valueName: "mode"),
        transform: { text in
            guard let mode = ObjectLockRetention.Mode(text: text) else {
                throw ValidationError("--retain-mode: \"\(text)\" is not a mode; use governance or compliance")
            }
            return mode
        })
    var retainMode: ObjectLockRetention.Mode?

    /// Puts the retry budget, rate caps and lock given on the command line over `options`
    /// (the configuration's or the defaults).
    func applyLimits(to options: inout DestinationOptions) {
        if let retainDays {
            options.objectLock = ObjectLockRetention(days: retainDays, mode: retainMode ?? options.objectLock?.mode ?? .governance)
        } else if let retainMode, options.objectLock != nil {
            options.objectLock?.mode = retainMode
        }
        if let retryFor { options.retry.budget = retryFor }
        if let limitUpload { options.transport.uploadLimit = limitUpload }
        if let limitDownload { options.transport.downloadLimit = limitDownload }
    }

    var options: DestinationOptions {
        var options = DestinationOptions(
            s3Endpoint: s3Endpoint, sshKey: sshKey, knownHosts: knownHosts, credentialsFile: credentials,
            logger: Terminal.logger)
        applyLimits(to: &options)
        if let caFile { options.transport.caFile = caFile }
        if insecure {
            options.transport.insecure = true
            Terminal.info(
                "storebackup: warning: --insecure: TLS certificates are not verified; anyone on the network path can read or alter backups")
        }
        return options
    }

    /// The destination `value` names (nil: the default folder); a bad one ends the command.
    func resolve(_ value: String?) -> any BackupDestination {
        resolve([value])[0]
    }

    /// Several destinations with one set of options (so --insecure warns once).
    func resolve(_ values: [String?]) -> [any BackupDestination] {
        let options = self.options
        return values.map { value in
            do { return try DestinationResolver.resolve(value, options: options) } catch { Terminal.fail(error) }
        }
    }
}
