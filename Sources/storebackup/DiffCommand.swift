import ArgumentParser
import Foundation
import StoreBackup
import Synchronization

struct DiffCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diff",
        abstract: "Show what changed between two backups, or a backup and the live store; print the SQL that brings rows back.",
        discussion: """
            storebackup diff OLDER NEWER [DATABASE]: OLDER is a backup's name or "latest"; \
            NEWER is a later backup, or the two words `live STORES_DIR` for the live store as it \
            is now. Prints, per database, the rows inserted, deleted and changed in each table \
            (matched by primary key, else by rowid; a table with neither is compared whole, and \
            says so), the tables, indexes, triggers and views added, removed or redefined, then \
            the files added, removed and changed (Core Data's external data in \
            .App_SUPPORT/_EXTERNAL_DATA is among them: bring such a file back with `extract`). \
            DATABASE (its path in the stores directory, as `storebackup ls` shows it) and \
            --table narrow the comparison; --where EXPR keeps only the rows for which the SQL \
            expression holds on either side. A live database is read-only, as one committed \
            state, while its app goes on writing; nothing in the store is written or locked.

            --rows lists each row: its key, then its values as SQL literals (a changed row: the \
            columns that differ, before -> after). --json prints one object: older, newer, \
            live, databases [{path, presence, tables [{name, presence, comparison, key, \
            inserted, deleted, changed, note, rows}], schema [{kind, type, name, table, before, \
            after}]}], files [{kind, path, type, sizeBefore, sizeAfter}]; with --rows each \
            table's rows [{kind, key, columns, before, after}] are included (values as SQL \
            literals).

            --sql (NEWER must be `live STORES_DIR`, DATABASE is required) prints instead the SQL \
            that brings the selected tables (--table, else all) of the live database back to \
            their state in OLDER, in one transaction: deletes of rows added since, updates of \
            changed rows, inserts of deleted rows, and (without --where) the tables, indexes \
            and triggers as they were. Read it, then apply it: sqlite3 STORES_DIR/DATABASE < \
            undo.sql. A table with no primary key and no usable rowid is refused. See \
            docs/look-inside.md.
            """)

    @Argument(help: ArgumentHelp("The older backup's name, or \"latest\".", valueName: "older"))
    var older: String

    @Argument(
        help: ArgumentHelp(
            "The newer side (a backup's name, or `live STORES_DIR`), then optionally the database.", valueName: "newer"))
    var rest: [String] = []

    @Option(name: .customLong("table"), help: ArgumentHelp("Only this table (repeatable); needs DATABASE.", valueName: "name"))
    var tables: [String] = []

    @Flag(help: "List the rows that differ.")
    var rows = false

    @Flag(help: "Print JSON (keys described above).")
    var json = false

    @Flag(help: "Print the SQL that brings the live rows back to OLDER (needs `live STORES_DIR` and DATABASE).")
    var sql = false

    @Option(name: .customLong("where"), help: ArgumentHelp("Only rows for which this SQL expression holds.", valueName: "expr"))
    var filter: String?

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    /// NEWER and DATABASE, from the words after OLDER.
    var sides: (newer: DiffSide, database: String?) {
        get throws {
            guard let first = rest.first else { throw ValidationError("give the newer side: a backup's name, or live STORES_DIR") }
            if first == "live" {
                guard rest.count >= 2 else { throw ValidationError("give the stores directory after \"live\"") }
                guard rest.count <= 3 else { throw ValidationError("too many arguments: OLDER live STORES_DIR [DATABASE]") }
                return (.live(storesDirectory: rest[1]), rest.count == 3 ? rest[2] : nil)
            }
            guard rest.count <= 2 else { throw ValidationError("too many arguments: OLDER NEWER [DATABASE]") }
            return (.backup(first), rest.count == 2 ? rest[1] : nil)
        }
    }

    func validate() throws {
        let (newer, database) = try sides
        if !tables.isEmpty && database == nil { throw ValidationError("--table needs the DATABASE it is in") }
        if sql {
            guard case .live = newer else {
                throw ValidationError("--sql brings live rows back: the newer side must be `live STORES_DIR`")
            }
            if database == nil { throw ValidationError("--sql needs the DATABASE whose rows it brings back") }
            if rows || json { throw ValidationError("--sql prints SQL only: leave out --rows and --json") }
        }
    }

    func run() async throws {
        let backups = BackupRepository(
            destination: try destination.resolve(), passwords: password.provider(confirm: false), logger: Terminal.logger)
        let (newer, database) = try sides
        let older = self.older, tables = self.tables, filter = self.filter
        if sql, case .live(let directory) = newer, let database {
            let printer = SQLPrinter()
            let name = await Terminal.runCancellable {
                try await backups.undoSQL(
                    backup: older, storesDirectory: directory, database: database, tables: tables, filter: filter,
                    write: printer.write)
            }
            Terminal.info("storebackup: SQL written for \(database) back to \"\(name)\"; review it, then: sqlite3 DATABASE < FILE")
            return
        }
        let options = DiffOptions(database: database, tables: tables, filter: filter, keepRows: rows && json ? Int.max : 0)
        let listing = rows && !json ? RowPrinter() : nil
        let diff = await Terminal.runCancellable {
            try await backups.diff(older, newer, options: options, onRow: listing.map { printer in printer.print })
        }
        if json {
            Terminal.output(try DiffOutput.json(diff))
        } else {
            DiffOutput.text(diff).forEach(Terminal.output)
        }
    }
}

/// `--sql`: each statement on its own line, on stdout (what to do with it goes to stderr).
private final class SQLPrinter: Sendable {
    func write(_ statement: String) {
        Terminal.output(statement)
    }
}

/// `--rows` as rows are found: a heading when the table changes, then one line per row.
private final class RowPrinter: Sendable {
    private let current = Mutex<String?>(nil)

    func print(_ database: String, _ table: String, _ change: RowChange) {
        let heading = "\(database), table \(table):"
        current.withLock { shown in
            if shown != heading {
                Terminal.output(LsCommand.visible(heading))
                shown = heading
            }
            Terminal.output("  " + LsCommand.visible(DiffOutput.describe(change)))
        }
    }
}
