import ArgumentParser
import Foundation
import StoreBackup

struct SqlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sql",
        abstract: "Run read-only SQL on a database as a backup holds it, without restoring or extracting it.",
        discussion: """
            Runs the statements (several allowed, separated by ";") on DATABASE (its path in \
            the store, as `storebackup ls` shows it, e.g. App.sqlite) as it was in the backup: \
            a full, or any point of an incremental chain. Prints each statement's rows as a \
            table, or with --csv (a header line per statement, fields quoted as RFC 4180 quotes them) or --json (an array of \
            {statement, columns, rows}; blobs as hex strings). In the table and CSV, NULL is \
            empty and a blob is X'hex'.

            Only the blocks of the backup that hold the pages a query reads are read: locally \
            with pread, from a remote destination with ranged requests. Each block is checked \
            against its SHA-256 in the backup's manifest before SQLite sees it (backups made \
            before block hashes, formats 1-3, are checked whole once when opened); a damaged \
            block fails the query that needs it and no row is shown from it. An encrypted \
            backup needs its password.

            Nothing is ever written: a statement that would write (INSERT, UPDATE, DELETE, \
            CREATE, …) is refused before anything runs, and the command exits non-zero. \
            The store is never touched. For exploring at length (an interactive sqlite3 \
            session), take the database out with `storebackup extract NAME DATABASE --into DIR`.
            """)

    @Argument(help: ArgumentHelp("The backup's name, or \"latest\".", valueName: "name"))
    var name: String

    @Argument(help: ArgumentHelp("The database's path in the store, e.g. App.sqlite.", valueName: "database"))
    var database: String

    @Argument(help: ArgumentHelp("Read-only SQL: one statement, or several separated by \";\".", valueName: "sql"))
    var sql: String

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    @Flag(help: "Print CSV instead of a table.")
    var csv = false

    @Flag(help: "Print JSON (described above) instead of a table.")
    var json = false

    func validate() throws {
        if csv && json { throw ValidationError("give at most one of --csv and --json") }
    }

    func run() async throws {
        let backups = BackupRepository(destination: try destination.resolve(), passwords: password.provider(confirm: false))
        let name = self.name, path = self.database, sql = self.sql
        let format: SqlOutput.Format = csv ? .csv : json ? .json : .table
        let printed = await Terminal.runCancellable {
            let database = try await backups.openDatabase(name, path: path)
            defer { database.close() }
            var output = SqlOutput(format: format)
            try database.forEachRow(sql) { statement, columns in
                output.begin(statement: statement, columns: columns)
            } row: { values in
                try output.add(values)
            }
            return output.finish()
        }
        if !printed.isEmpty { Terminal.output(printed) }
    }
}
