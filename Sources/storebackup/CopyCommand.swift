import ArgumentParser
import Foundation
import StoreBackup

struct CopyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copy backups from one destination to another without rebuilding them (3-2-1).",
        discussion: """
            Copies the named backup, the newest one ("latest"), the newest made at or before \
            --at TIME (an encrypted one's time is read with --password-file or a prompt), or \
            with --all every backup the target lacks. A backup is read in place from a local folder or downloaded to a \
            temporary file, then uploaded under the same name; the target checks the copy \
            (S3: Content-MD5 and ETag; WebDAV: a read-back; SFTP: the size; Dropbox: the content \
            hash) and it is listed again to compare sizes. Nothing is ever overwritten: a backup \
            already at the target with the same name and size is reported as "already there" \
            (so running the command again is harmless); the same name with a different size is \
            an error for that backup. Exits non-zero when any backup could not be copied.

            An incremental backup is copied with the part of its chain the target lacks, base \
            first (--all copies oldest first, so in chain order): the target never holds an \
            incremental without its base. On S3 with Object Lock, the bases' locks are extended \
            to the incremental's.
            """)

    @Argument(help: ArgumentHelp("The backup's name, or \"latest\" (leave out with --all).", valueName: "name"))
    var name: String?

    @Flag(help: "Copy every backup at the source that the target does not have, oldest first.")
    var all = false

    @Option(help: ArgumentHelp("The destination to copy from (same forms as --to).", valueName: "destination"))
    var from: String

    @Option(
        help: ArgumentHelp(
            "The destination to copy to: a folder path or file:// URL, s3://BUCKET/PREFIX, webdav(s)://HOST[:PORT]/PATH, sftp://USER@HOST[:PORT]/PATH, or dropbox:///PATH.",
            valueName: "destination"))
    var to: String

    @OptionGroup var connection: ConnectionOption

    @OptionGroup var at: AtOption

    @OptionGroup var password: PasswordOption

    @Flag(help: "Print JSON: an array of {name, size, status (\"copied\", \"already there\" or \"failed\"), error}.")
    var json = false

    func validate() throws {
        if all && name != nil { throw ValidationError("give a backup name or --all, not both") }
        if at.at != nil && (all || name != nil) { throw ValidationError("--at chooses the backup: give no name and no --all") }
        if !all && name == nil && at.at == nil { throw ValidationError("give a backup name, \"latest\", --at TIME or --all") }
        try at.validate()
    }

    func run() async throws {
        let ends = connection.resolve([from, to])
        let source = BackupRepository(destination: ends[0]), target = ends[1]
        let printer = ProgressPrinter.shared
        let all = self.all
        var name = self.name
        if let moment = at.date() {
            // Chosen by the time its manifest records: an encrypted one's needs the password.
            let chooser = BackupRepository(destination: ends[0], passwords: password.provider(confirm: false))
            name = await Terminal.runCancellable { try await chooser.backup(at: moment).name }
        }
        let chosen = name
        let outcomes = await Terminal.runCancellable {
            if all { return try await source.copyAll(to: target, progress: printer.handler()) }
            return try await source.copy(chosen!, to: target, progress: printer.handler())
        }
        printer.finishLine()
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            Terminal.output(String(decoding: try encoder.encode(outcomes), as: UTF8.self))
        } else {
            for outcome in outcomes {
                switch outcome.status {
                case .copied: Terminal.output("copied \(outcome.name) (\(Terminal.formatBytes(outcome.size)))")
                case .alreadyThere: Terminal.output("already there: \(outcome.name)")
                case .failed: Terminal.info("storebackup: error: \(outcome.name): \(outcome.error ?? "failed")")
                }
            }
            if outcomes.isEmpty { Terminal.info("no backups in \(source.destination.displayName)") }
        }
        if outcomes.contains(where: { $0.status == .failed }) { throw ExitCode(1) }
    }
}
