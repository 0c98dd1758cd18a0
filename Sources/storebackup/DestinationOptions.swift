import ArgumentParser
import StoreBackup

/// Shared by commands that read or write backups.
struct DestinationOption: ParsableArguments {
    @Option(name: [.customLong("to"), .customLong("from")],
            help: ArgumentHelp("Where backups live: a folder path or file:// URL, s3://BUCKET/PREFIX, webdav(s)://HOST[:PORT]/PATH, sftp://USER@HOST[:PORT]/PATH, or dropbox:///PATH (see `storebackup auth dropbox`).", valueName: "destination"))
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
            Terminal.fail(StoreBackupError.invalidDestination(
                url: "--to/--from", reason: "this command takes one destination; \(destinations.count) were given"))
        }
        return connection.resolve(destination)
    }
}

/// How to reach remote destinations: endpoints, TLS, SSH keys, credentials.
struct ConnectionOption: ParsableArguments {
    @Option(name: .customLong("s3-endpoint"),
            help: ArgumentHelp("S3-compatible endpoint URL (default: AWS_ENDPOINT_URL, else AWS); path-style addressing.", valueName: "url"))
    var s3Endpoint: String?

    @Option(name: .customLong("ca-file"),
            help: ArgumentHelp("Also trust the CAs in this PEM file (default: STOREBACKUP_CA_FILE).", valueName: "file"))
    var caFile: String?

    @Flag(help: "Do not verify TLS certificates (dangerous; prints a warning).")
    var insecure = false

    @Option(name: .customLong("ssh-key"),
            help: ArgumentHelp("SSH private key for sftp:// (default ~/.ssh/id_ed25519, then ~/.ssh/id_rsa).", valueName: "file"))
    var sshKey: String?

    @Option(name: .customLong("known-hosts"),
            help: ArgumentHelp("known_hosts file for sftp:// (default ~/.ssh/known_hosts); unknown hosts are refused.", valueName: "file"))
    var knownHosts: String?

    @Option(name: .customLong("credentials"),
            help: ArgumentHelp("Credentials file (NAME=value lines, chmod 600); takes precedence over the environment.", valueName: "file"))
    var credentials: String?

    var options: DestinationOptions {
        var options = DestinationOptions(s3Endpoint: s3Endpoint, sshKey: sshKey, knownHosts: knownHosts, credentialsFile: credentials,
                                         logger: Terminal.logger)
        if let caFile { options.transport.caFile = caFile }
        if insecure {
            options.transport.insecure = true
            Terminal.info("storebackup: warning: --insecure: TLS certificates are not verified; anyone on the network path can read or alter backups")
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
