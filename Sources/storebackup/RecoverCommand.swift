import ArgumentParser
import StoreBackup

struct RecoverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Repair a stores directory after a restore was interrupted.",
        discussion: """
            Every other command on the store does this first by itself; this one only does that, \
            and names any folder a restore set aside beside the store (<dir>_FailedRestore) with its size, \
            and the store the last restore replaced (<dir>_Replaced, kept for `undo`). Like every \
            command on the store, it removes that kept store once its time is up.
            """)

    @Argument(help: ArgumentHelp("The stores directory.", valueName: "stores-dir"))
    var storesDirectory: String

    func run() async throws {
        let helper = StoreHelper(
            storesDirectory: storesDirectory, destination: LocalFolderDestination(folder: "/"), logger: Terminal.logger)
        let outcome = await Terminal.runCancellable { try helper.recover() }
        if outcome == .nothingToDo { Terminal.info("storebackup: \(helper.storesDirectory) needs no recovery") }
        for store in StoreLayout(storesDirectory: helper.storesDirectory).setAsideStores() {
            Terminal.info("storebackup: set aside: \(store.path) (\(Terminal.formatBytes(store.bytes))); remove it when no longer needed")
        }
        if let kept = helper.replacedStore {
            let until = kept.keptUntil.map { " until " + UndoCommand.date($0) } ?? ""
            Terminal.info(
                "storebackup: kept for undo\(until): \(kept.path) (\(Terminal.formatBytes(kept.bytes))), replaced by \(UndoCommand.replacedBy(kept))"
            )
        }
    }
}
