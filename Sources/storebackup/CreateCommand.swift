import ArgumentParser
import Foundation
import StoreBackup

struct CreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Back up a stores directory into \"<date> Stores.zip\".",
        discussion: """
            Every SQLite database (found by its file header) is checkpointed and read as one \
            consistent snapshot while other processes keep writing; everything else in the \
            directory (hidden folders, empty folders, modes, times) goes in as it is. The archive \
            is written under a temporary name and published atomically; its name is printed on stdout.

            Several --to: the archive is built once and published to every destination at once; \
            each one's outcome is reported (and in --json), and the exit status is non-zero if any \
            failed. With --store, the given --to replace the configured destinations.

            --incremental: backups in chains. The first is a full backup (a standalone ZIP, as \
            without it); the next ones are incremental, "<date> incremental on <base date> \
            Stores.zip", holding only the database pages and files that changed since the previous \
            backup at that destination; restoring one reads its chain back to the full. A full \
            starts a new chain every --full-every (7d), after --max-chain incrementals (14), when \
            the changes exceed --max-delta-share of the store (0.5), with --full, and whenever \
            the chain state kept beside the store (.<name>.storebackup-chains) is missing, \
            damaged or does not match, or the chain at the destination is broken; the reason is \
            printed (and in --json as fullReason). An incremental is checked against its base's \
            manifest before it is published. See docs/incremental-backups.md.
            """)

    @Argument(help: ArgumentHelp("The stores directory to back up (or --store NAME from the configuration).", valueName: "stores-dir"))
    var storesDirectory: String?

    @OptionGroup var destination: DestinationOption

    @Option(help: ArgumentHelp("Compression: fast, default, best, or 0-9 (0 stores without compressing).", valueName: "level"))
    var level: String = "default"

    @Option(
        help: ArgumentHelp(
            "Threads that compress (default: one per core). Fewer leave CPU to the app while the backup runs, at the cost of a slower backup.",
            valueName: "n"))
    var threads: Int?

    @Flag(help: "Encrypt every entry (WinZip AES-256; 7-Zip and WinZip open it with the password).")
    var encrypt = false

    @OptionGroup var password: PasswordOption

    @OptionGroup var proofKey: ProofKeyOption

    @Flag(
        help:
            "Skip create's PRAGMA integrity_check of each database (run beside the archive). Without it the databases get no proofs, and restore checks them."
    )
    var noDatabaseCheck = false

    @Flag(
        help:
            "Make backups in chains: an incremental backup (only what changed) on the previous one when the policy allows, else a full one."
    )
    var incremental = false

    @Flag(help: "With --incremental: make a full backup now (it starts a new chain).")
    var full = false

    @Option(help: ArgumentHelp("With --incremental: a full backup at least this often (e.g. 7d, 24h).", valueName: "duration"))
    var fullEvery: String?

    @Option(help: ArgumentHelp("With --incremental: a full backup once the chain has this many incrementals.", valueName: "n"))
    var maxChain: Int?

    @Option(
        help: ArgumentHelp(
            "With --incremental: a full backup when the changes exceed this share of the store's bytes (0-1).", valueName: "share"))
    var maxDeltaShare: Double?

    @Flag(help: "Print the result as JSON.")
    var json = false

    @Flag(
        name: [.short, .long],
        help: "Also say which other processes had the store open (information only: backing up a store in use is normal).")
    var verbose = false

    @Flag(help: "After a successful upload, apply the store's retention from the configuration (see `prune`).")
    var prune = false

    @Option(
        help: ArgumentHelp("Back up this store of the configuration (its path, destination, level, retention, hooks).", valueName: "name"))
    var store: String?

    @OptionGroup var configurationFile: ConfigurationOption

    @OptionGroup var metrics: MetricsFileOption

    func validate() throws {
        if storesDirectory == nil && store == nil {
            throw ValidationError("give the stores directory, or --store NAME with a configuration")
        }
        guard CompressionLevel.parse(level) != nil else {
            throw ValidationError("--level must be fast, default, best or a number from 0 to 9")
        }
        if let threads, !(1...StoreJob.maximumThreads).contains(threads) {
            throw ValidationError("--threads must be a number from 1 to \(StoreJob.maximumThreads)")
        }
        if password.passwordFile != nil && !encrypt {
            throw ValidationError("--password-file is only used with --encrypt")
        }
        if !incremental && (full || fullEvery != nil || maxChain != nil || maxDeltaShare != nil) {
            throw ValidationError("--full, --full-every, --max-chain and --max-delta-share are used with --incremental")
        }
        _ = try incrementalPolicy()
    }

    /// The chain policy of `--incremental` and its options; nil without it.
    func incrementalPolicy() throws -> IncrementalPolicy? {
        guard incremental else { return nil }
        var policy = IncrementalPolicy(forceFull: full)
        if let fullEvery {
            guard let seconds = try? DurationText.parseSeconds(fullEvery), seconds > 0 else {
                throw ValidationError("--full-every must be a duration such as 7d, 24h or 90m")
            }
            policy.fullEvery = seconds
        }
        if let maxChain {
            guard maxChain >= 0 else { throw ValidationError("--max-chain must be 0 or more") }
            policy.maxChainLength = maxChain
        }
        if let maxDeltaShare {
            guard (0...1).contains(maxDeltaShare) else { throw ValidationError("--max-delta-share must be from 0 to 1") }
            policy.maxDeltaShare = maxDeltaShare
        }
        return policy
    }

    func run() async throws {
        // The configured path (retention, state file, hooks): for cron and systemd timers.
        if prune || store != nil { return try await runConfigured() }
        guard let storesDirectory else { return }
        metrics.start()
        var passwords: PasswordProvider?
        if encrypt {
            guard let provider = password.provider(confirm: true) else {
                Terminal.fail(
                    StoreBackupError.passwordUnavailable(
                        reason: "--encrypt needs a password: --password-file FILE, STOREBACKUP_PASSWORD, or run on a terminal to be asked"))
            }
            // Asked before any work starts, so the prompt is not mixed with progress.
            do { passwords = .fixed(try provider.password()) } catch { Terminal.fail(error) }
        }
        // One archive, published to every destination at once (`--to A --to B`: the 3-2-1 rule).
        let targets =
            destination.destinations.count > 1
            ? destination.connection.resolve(destination.destinations.map { Optional($0) }) : [try destination.resolve()]
        let helper = StoreHelper(
            storesDirectory: storesDirectory, destination: targets[0], passwords: passwords, logger: Terminal.logger)
        var settings = CreateOptions(
            compressionLevel: CompressionLevel.parse(level)!, encrypt: encrypt, threads: threads, incremental: try incrementalPolicy())
        settings.checkDatabases = !noDatabaseCheck
        // An encrypted backup's proofs are keyed by its password: no key file is needed (or made).
        if !encrypt && !noDatabaseCheck { settings.proofKey = proofKey.keyForCreate() }
        let options = settings
        let printer = ProgressPrinter.shared
        // Before the backup: its own reading of the store is this process, never listed.
        let usage = targets.count == 1 && (json || verbose) ? StoreUsage.scan(storesDirectory: helper.storesDirectory) : nil
        if verbose, let usage { Self.describe(usage) }
        let outcomes = await Terminal.runCancellable {
            let outcomes = try await helper.createBackup(options, alsoTo: Array(targets.dropFirst()), progress: printer.handler())
            // One destination: its failure is the command's error, said as any other.
            if outcomes.count == 1, let error = outcomes[0].error { throw error }
            return outcomes
        }
        printer.finishLine()
        if outcomes.count == 1, let backup = outcomes[0].backup {
            try printBackup(backup, usage: usage)
        } else {
            try printOutcomes(outcomes)
        }
    }

    /// `--verbose`: which processes had the store open when the backup began.
    static func describe(_ usage: StoreUsage) {
        if usage.isUnused {
            Terminal.info("storebackup: no other process has the store open")
        } else {
            for user in usage.users {
                Terminal.info("storebackup: \(user.file) is open in process \(user.pid) (\(user.command))")
            }
        }
        for unseen in usage.blindSpots { Terminal.info("storebackup: not seen: \(unseen)") }
    }
}
