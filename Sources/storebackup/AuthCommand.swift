import ArgumentParser
import Foundation
import StoreBackup

/// `storebackup auth SERVICE`: connect storebackup to an account once.
struct AuthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "auth",
        abstract: "Connect storebackup to a cloud account (Dropbox) once, storing a renewable token.",
        subcommands: [DropboxAuthCommand.self])
}

struct DropboxAuthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dropbox",
        abstract: "Allow storebackup to use a Dropbox account, for dropbox:///PATH destinations.",
        discussion: """
            Create an app in the Dropbox App Console (https://www.dropbox.com/developers/apps; \
            "App folder" access is enough, with the files.content.read, files.content.write and \
            files.metadata.read permissions) and pass its app key. No app secret is needed: \
            the PKCE code flow is used.

            The command prints a link. Open it in a browser, allow access, and paste the code \
            Dropbox shows. The resulting refresh token and the app key are written to the \
            credentials file (default ~/.config/storebackup/credentials, mode 0600) as \
            STOREBACKUP_DROPBOX_REFRESH_TOKEN and STOREBACKUP_DROPBOX_APP_KEY; later commands \
            renew their short-lived access tokens from it by themselves. No token is ever printed.

            Instead of this, a long-lived access token can be given in STOREBACKUP_DROPBOX_TOKEN.
            """)

    @Option(
        name: .customLong("app-key"),
        help: ArgumentHelp("The Dropbox app's key (default: STOREBACKUP_DROPBOX_APP_KEY).", valueName: "key"))
    var appKey: String?

    @Option(
        name: .customLong("credentials"),
        help: ArgumentHelp(
            "Credentials file to write (default ~/.config/storebackup/credentials); other lines in it are kept.",
            valueName: "file"))
    var credentials: String?

    @Option(
        name: .customLong("ca-file"),
        help: ArgumentHelp("Also trust the CAs in this PEM file (default: STOREBACKUP_CA_FILE).", valueName: "file"))
    var caFile: String?

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard let key = appKey ?? environment["STOREBACKUP_DROPBOX_APP_KEY"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            throw ValidationError("give the Dropbox app key with --app-key KEY (from the app's page in the Dropbox App Console)")
        }
        let authorization: DropboxAuthorization
        do { authorization = try DropboxAuthorization(appKey: key) } catch { Terminal.fail(error) }
        var settings = DestinationOptions(credentialsFile: nil)
        if let caFile { settings.transport.caFile = caFile }
        let options = settings
        let file = credentials ?? CredentialsFile.defaultPath(environment: environment)

        Terminal.info("1. Open this link in a browser and allow access:")
        Terminal.output(authorization.authorizeURL(environment: environment))
        Terminal.info("2. Paste the code Dropbox shows here and press Enter:")
        guard let code = readLine(strippingNewline: true), !code.trimmingCharacters(in: .whitespaces).isEmpty else {
            Terminal.fail(
                StoreBackupError.destination(destination: "Dropbox", reason: "no authorization code was given; nothing was stored"))
        }
        await Terminal.runCancellable { try await authorization.complete(code: code, credentialsFile: file, options: options) }
        Terminal.info("storebackup: Dropbox access stored in \(file); use --to dropbox:///PATH (e.g. dropbox:///Backups)")
    }
}
