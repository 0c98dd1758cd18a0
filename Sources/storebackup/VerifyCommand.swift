import ArgumentParser
import Foundation
import StoreBackup

struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check that backups can be restored, without touching any store.",
        discussion: """
            Each backup is downloaded to a temporary place; the archive is read in full, every file \
            is compared with its manifest checksum (an encrypted backup's password is checked first), and every database passes PRAGMA integrity_check \
            in a scratch folder. One line per backup; the exit status is non-zero if any fails.

            With --store NAME, runs that configured store's restore drill once, exactly as `run` \
            does on the drill's schedule: the backups its `verify: {pick: …}` names (the newest \
            by default), the result recorded in the state file (`status`) and the metrics, and \
            the on-failure hooks run when a backup fails. For cron and timers.
            """)

    @Argument(help: ArgumentHelp("A backup's name, or \"latest\" (default). Use --all for every backup.", valueName: "name"))
    var name: String?

    @Flag(help: "Verify every backup in the destination.")
    var all = false

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    @OptionGroup var proofKey: ProofKeyOption

    @Flag(help: "Run PRAGMA integrity_check on every database, also those whose proof says create checked the same bytes.")
    var checkDatabases = false

    @Flag(
        help:
            "Check a backup that has no manifest as far as possible (CRCs, PRAGMA integrity_check) instead of failing it as not verifiable."
    )
    var allowUnverified = false

    @Flag(
        help:
            "Make the links that point outside the stores directory (create warned about each and recorded them in the backup); other such links are still refused."
    )
    var allowOutsideLinks = false

    @Flag(
        help:
            "Check only the central directory, the manifest, their agreement and the links, reading no file's content; a remote backup is read in ranges (its directory and manifest), not downloaded."
    )
    var metadataOnly = false

    @Flag(
        help:
            "Print JSON: an array of {name, ok, problem, files, databases, warning, damagedDatabases} (with --store, each also has its destination)."
    )
    var json = false

    @Option(
        help: ArgumentHelp(
            "Run the restore drill of this store of the configuration (its destination, pick, state, metrics and hooks).", valueName: "name"
        ))
    var store: String?

    @OptionGroup var configurationFile: ConfigurationOption

    @OptionGroup var metrics: MetricsFileOption

    @OptionGroup var at: AtOption

    func validate() throws {
        if all && name != nil { throw ValidationError("give a backup name or --all, not both") }
        if at.at != nil && (all || name != nil || store != nil) {
            throw ValidationError("--at chooses the backup: give no name, --all or --store")
        }
        if store != nil && (all || name != nil) {
            throw ValidationError("--store runs the store's drill, which picks the backups itself; give no name and no --all")
        }
        if store != nil && metadataOnly {
            throw ValidationError("--metadata-only checks the backups named here; the drill of --store reads them in full")
        }
        if store != nil && !destination.destinations.isEmpty {
            throw ValidationError("--store verifies at the store's configured destinations; give no --from")
        }
    }

    func run() async throws {
        if let store { return try await runDrill(store) }
        metrics.start()
        let backups = BackupRepository(destination: try destination.resolve(), passwords: password.provider(confirm: false))
        let options = ExtractionOptions(
            allowUnverified: allowUnverified, allowOutsideLinks: allowOutsideLinks, proofKey: proofKey.keyForReading(),
            checkDatabases: checkDatabases)
        var chosen: BackupSelection = all ? .all : (name.map { $0 == "latest" ? .latest : .named($0) } ?? .latest)
        if let moment = at.date() { chosen = .named(await Terminal.runCancellable { try await backups.backup(at: moment).name }) }
        let selection = chosen
        let printer = ProgressPrinter.shared
        let metadataOnly = self.metadataOnly
        let results = await Terminal.runCancellable {
            try await backups.verify(selection, options: options, metadataOnly: metadataOnly, progress: printer.handler())
        }
        .map(Self.inCommandLineWords)
        printer.finishLine()
        try Self.print(results, json: json)
        if results.contains(where: { !$0.ok }) { throw ExitCode(1) }
    }

    static func print(_ results: [VerificationResult], json: Bool) throws {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            Terminal.output(String(decoding: try encoder.encode(results), as: UTF8.self))
        } else {
            for result in results {
                Terminal.output(
                    result.ok
                        ? "ok      \(result.name)  (\(result.files) entries, \(result.databases) databases)"
                            + (result.warning.map { "; \($0)" } ?? "")
                        : "FAILED  \(result.name): \(Self.problem(result))")
            }
        }
    }

    /// A backup whose databases were damaged before it was made is said with the flag that
    /// restores it anyway.
    static func inCommandLineWords(_ result: VerificationResult) -> VerificationResult {
        guard let damaged = result.damagedDatabases, !damaged.isEmpty else { return result }
        var result = result
        let verb = damaged.count == 1 ? "was" : "were"
        result.problem =
            "restorable only with --accept-damaged-databases: \(damaged.joined(separator: ", ")) \(verb) already damaged when the backup was made (it fails its integrity check but matches the checksum the backup recorded)"
        return result
    }

    /// The problem with its remedy in the command line's words (the flag to pass).
    static func problem(_ result: VerificationResult) -> String {
        let problem = result.problem ?? "unknown problem"
        guard let remedy = result.remedy, problem.hasSuffix("; \(remedy)") else { return problem }
        return String(problem.dropLast(remedy.description.count + 2)) + ErrorAdvice.advice(remedy)
    }
}
