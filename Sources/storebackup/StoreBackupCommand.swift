import ArgumentParser
import StoreBackup

@main
struct StoreBackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storebackup",
        abstract: "Back up and restore SQLite stores directories, safely, while the app keeps running.",
        discussion: """
            A stores directory is everything an app keeps on disk: SQLite databases (with their \
            -wal/-shm files), hidden folders of external data, other files. `create` snapshots every \
            database consistently and zips the whole directory into "<date> Stores.zip"; `restore` \
            verifies a backup and swaps it in, rolling back if the restored store does not load.

            Destinations: a local folder path or file:// URL, s3://BUCKET/PREFIX, \
            webdav://HOST/PATH or webdavs://…, sftp://USER@HOST/PATH, dropbox:///PATH. \
            Credentials come from a --credentials file, the environment, or \
            ~/.config/storebackup/credentials (never from the command line; see docs/destinations.md). \
            Without --to/--from, backups go to \
            $STOREBACKUP_DESTINATION, else $XDG_DATA_HOME/storebackup/backups, else \
            ~/.local/share/storebackup/backups.
            """,
        version: StoreBackupVersion.current,
        subcommands: [
            CreateCommand.self, ListCommand.self, LsCommand.self, RestoreCommand.self, UndoCommand.self, ExtractCommand.self,
            SqlCommand.self, DiffCommand.self, VerifyCommand.self, DeleteCommand.self, RecoverCommand.self,
            RunCommand.self, PruneCommand.self, StatusCommand.self, AuthCommand.self, CopyCommand.self,
        ]
    )

    static func main() async {
        MallocTuning.apply()
        LocalTimeZone.pin()
        TestSwitches.install()
        await main(nil)
    }
}
