import ArgumentParser
import StoreBackup

/// Shared by commands that read or write backups.
struct DestinationOption: ParsableArguments {
    @Option(name: [.customLong("to"), .customLong("from")],
            help: ArgumentHelp("Where backups live: a folder path or file:// URL, s3://BUCKET/PREFIX, webdav(s)://HOST[:PORT]/PATH, sftp://USER@HOST[:PORT]/PATH, or dropbox:///PATH (see `storebackup auth dropbox`).", valueName: "destination"))
    var destination: String?

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
        var options = DestinationOptions(s3Endpoint: s3Endpoint, sshKey: sshKey, knownHosts: knownHosts, credentialsFile: credentials)
        if let caFile { options.transport.caFile = caFile }
        if insecure {
            options.transport.insecure = true
            Terminal.info("storebackup: warning: --insecure: TLS certificates are not verified; anyone on the network path can read or alter backups")
        }
        return options
    }

    func resolve() throws -> any BackupDestination {
        do { return try DestinationResolver.resolve(destination, options: options) } catch { Terminal.fail(error) }
    }
}
