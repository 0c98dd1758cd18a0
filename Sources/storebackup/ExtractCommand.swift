import ArgumentParser
import Foundation
import StoreBackup

struct ExtractCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extract",
        abstract: "Write some files of a backup (or all of it) into a new folder, without touching the store.",
        discussion: """
            One file back without a restore: the named files or folders of the backup (every \
            entry when no path is given) are written into the new folder --into, keeping their \
            place in the backup: `extract latest .App_SUPPORT/_EXTERNAL_DATA/<uuid> --into out` \
            writes out/.App_SUPPORT/_EXTERNAL_DATA/<uuid>. A database comes out as the \
            consistent snapshot the backup holds. Paths are as `storebackup ls` shows them; a \
            folder brings everything beneath it. A path the backup does not hold is an error, \
            and nothing is written.

            Every check a restore makes applies. Before anything is written the whole archive is \
            checked: names (no absolute paths, .., control characters), entry counts and sizes \
            against fixed limits, every entry against the manifest, every link resolved through \
            the others (none may lead outside), and the declared sizes against the free space. \
            Each file written is checked against its SHA-256 and cut off at its declared size, \
            and each database passes PRAGMA integrity_check. A backup without a manifest is \
            refused unless --allow-unverified.

            The stores directory is never read, locked or recovered: extract works while a \
            restore holds the store's lock, and on a machine with no store at all. The folder \
            --into must not exist (or be empty) and its parent must exist. The files are \
            unpacked into a temporary .storebackup-tmp-<pid>-extract-… folder beside it, synced, \
            then renamed into place, so a failed or interrupted extract leaves no --into folder \
            (a killed one's temporary is removed by the next extract into the same place). From \
            a remote backup only the central directory, the manifest, the links and the files \
            asked for are read, with ranged requests (a server that ignores ranges: the backup \
            is downloaded to a temporary file there first).
            """)

    @Argument(help: ArgumentHelp("The backup's name, or \"latest\" (left out with --at).", valueName: "name"))
    var name: String?

    @OptionGroup var at: AtOption

    @Argument(
        help: ArgumentHelp(
            "Paths inside the backup (files or folders, as `storebackup ls` shows them); none: everything.", valueName: "path"))
    var paths: [String] = []

    @Option(help: ArgumentHelp("The folder to create and write into (must not exist, or be empty).", valueName: "dir"))
    var into: String

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    @OptionGroup var proofKey: ProofKeyOption

    @Flag(
        help: "Extract from a backup that has no manifest (made by hand or by another tool), checking only CRCs and PRAGMA integrity_check."
    )
    var allowUnverified = false

    @Flag(
        help:
            "Make the links that point outside the stores directory (create warned about each and recorded them in the backup); other such links are still refused."
    )
    var allowOutsideLinks = false

    func validate() throws {
        if name == nil && at.at == nil { throw ValidationError("Missing expected argument '<name>'") }
        try at.validate()
    }

    func run() async throws {
        let backups = BackupRepository(destination: try destination.resolve(), passwords: password.provider(confirm: false))
        let options = ExtractionOptions(
            allowUnverified: allowUnverified, allowOutsideLinks: allowOutsideLinks, proofKey: proofKey.keyForReading())
        var chosenName = self.name ?? "latest", chosenPaths = self.paths
        if let moment = at.date() {
            // With --at every argument is a path.
            chosenPaths = (self.name.map { [$0] } ?? []) + chosenPaths
            chosenName = await Terminal.runCancellable { try await backups.backup(at: moment).name }
        }
        let name = chosenName, paths = chosenPaths, into = self.into
        let printer = ProgressPrinter.shared
        let result = await Terminal.runCancellable {
            try await backups.extract(name, paths: paths, into: into, options: options, progress: printer.handler())
        }
        printer.finishLine()
        if let warning = result.warning { Terminal.info("storebackup: warning: \(warning)") }
        let databases = result.databasesChecked.isEmpty ? "" : ", \(result.databasesChecked.count) databases checked"
        Terminal.info(
            "storebackup: extracted \(result.entryCount) entries (\(Terminal.formatBytes(result.byteCount))) of \"\(result.backupName)\" into \(result.directory)\(databases)"
        )
    }
}
