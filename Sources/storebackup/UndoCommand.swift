import ArgumentParser
import Foundation
import StoreBackup

struct UndoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "undo",
        abstract: "Take the last restore back: put the store it replaced back in place.",
        discussion: """
            A restore keeps the store it replaces beside it as <dir>_Replaced, for 7 days unless \
            restore's --keep-replaced says otherwise (`status` lists it with its size and expiry). \
            undo swaps it back in the way restore swaps a backup in: the same in-use check \
            (--force), --stop-command/--start-command (or the configured store's), the same \
            quick check of every database with rollback when it fails, and a journal that makes \
            a kill at any moment leave the store as it was before the undo or after it.

            The restored store it replaces is removed, with anything written to it since the \
            restore (restore the same backup again to get the backup's state back). There is \
            then nothing left to undo: a second undo fails, as does one after the kept store \
            expired or after a restore with --no-keep.
            """)

    @Argument(help: ArgumentHelp("The stores directory a restore replaced.", valueName: "stores-dir"))
    var storesDirectory: String

    @OptionGroup var app: AppCommandOptions

    @Flag(help: "Do not ask for confirmation (required when not on a terminal).")
    var yes = false

    @Flag(help: "Undo even if other processes have the store open (they lose what they write afterwards), with a warning naming them.")
    var force = false

    @Flag(help: "Print the result as JSON: {storesDirectory, replacedBy, replacedAt, size, app, storeInUseWarning}.")
    var json = false

    @OptionGroup var configurationFile: ConfigurationOption

    func run() async throws {
        let helper = StoreHelper(
            storesDirectory: storesDirectory, destination: LocalFolderDestination(folder: "/"), logger: Terminal.logger)
        let configured = configurationFile.configuredStore(helper.storesDirectory)
        let options = RestoreOptions(appCommands: app.appCommands(configured: configured?.appCommands), allowStoreInUse: force)
        if !yes, let kept = helper.replacedStore {
            guard Terminal.standardInputIsTerminal else {
                Terminal.fail(
                    StoreBackupError.restoreRefused(
                        reason: "undo replaces \(helper.storesDirectory); pass --yes to confirm when not running on a terminal"))
            }
            let question =
                "Put back the store \(Self.replacedBy(kept)) replaced, removing the current \(helper.storesDirectory) and what was written to it since?"
            guard Terminal.confirm(question) else {
                Terminal.fail(StoreBackupError.restoreRefused(reason: "undo not confirmed; nothing was changed"))
            }
        }
        let hooks = RestoreCommand.reloadHooks()
        let result = await Terminal.runCancellable { try await helper.undoRestore(options: options, hooks: hooks) }
        Terminal.info(
            "storebackup: put back the store \(Self.replacedBy(result.putBack)) replaced into \(result.storesDirectory); the restored store was removed; there is nothing left to undo"
        )
        if json { try printJSON(result) }
        if let failure = result.appDowntime?.startFailure {
            Terminal.fail(StoreBackupError.restoreRefused(reason: "the undo is done, but \(failure); start the app"))
        }
    }

    private func printJSON(_ result: UndoResult) throws {
        let formatter = ISO8601DateFormatter()
        var summary: [String: Any] = ["storesDirectory": result.storesDirectory, "size": result.putBack.bytes]
        summary["replacedBy"] = result.putBack.replacedBy ?? NSNull()
        summary["replacedAt"] = result.putBack.replacedAt.map(formatter.string(from:)) ?? NSNull()
        if let warning = result.storeInUseWarning { summary["storeInUseWarning"] = warning }
        if let downtime = result.appDowntime { summary["app"] = downtime.jsonObject }
        let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])
        Terminal.output(String(decoding: data, as: UTF8.self))
    }

    /// `the restore of "NAME" on DATE`, or `a restore` when the record is missing.
    static func replacedBy(_ kept: ReplacedStore) -> String {
        guard let name = kept.replacedBy else { return "a restore" }
        return "the restore of \"\(name)\"" + (kept.replacedAt.map { " on " + UndoCommand.date($0) } ?? "")
    }

    static func date(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss zzz"
        return formatter.string(from: date)
    }

    /// The command that undoes a restore which kept `kept`, and the line restore prints with
    /// it. Stop and start commands given on the command line are not repeated (they may carry
    /// credentials); the line says to give them again.
    static func describe(_ kept: ReplacedStore, storesDirectory: String, configuration: String?, appCommandsGiven: Bool)
        -> (command: String, text: String)
    {
        var command = "storebackup undo " + shellQuoted(storesDirectory)
        if let configuration { command += " --config " + shellQuoted(configuration) }
        var text = "the replaced store is kept in \(kept.path) (\(Terminal.formatBytes(kept.bytes)))"
        if let until = kept.keptUntil { text += " until \(date(until))" }
        text += "; to undo this restore: \(command)"
        if appCommandsGiven { text += " with the same --stop-command and --start-command" }
        return (command, text)
    }

    /// `text` as one shell word: unchanged when it has only safe characters, else in single quotes.
    static func shellQuoted(_ text: String) -> String {
        let safe = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=")
        if !text.isEmpty && text.allSatisfy(safe.contains) { return text }
        return "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
