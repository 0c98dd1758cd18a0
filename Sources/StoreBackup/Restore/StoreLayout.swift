import Foundation

/// The folders a restore works with, all beside the live stores directory so every
/// step is a rename on one filesystem: `<name>_New` (the unpacked backup),
/// `<name>_Old` (the previous store while the new one is tried),
/// `<name>_FailedRestore` (a restored store that failed to load) and `<name>_Replaced`
/// (the store the last committed restore replaced, kept for an undo).
package struct StoreLayout: Sendable {
    /// The live stores directory (absolute).
    package let live: String
    /// The folder holding the live store and its `_New`/`_Old`/`_FailedRestore` siblings.
    package var parent: String { FileSystem.parentDirectory(of: live) }
    /// The live store's folder name.
    package var name: String { FileSystem.lastComponent(of: live) }
    /// Where a restore unpacks and checks the backup before swapping it in.
    package var new: String { live + "_New" }
    /// Where the previous store waits while the restored one is reloaded.
    package var old: String { live + "_Old" }
    /// Where a restored store that the app rejected (its `reload` threw) is kept for inspection.
    package var failed: String { live + "_FailedRestore" }
    /// Where the store the last committed restore replaced is kept until it expires, for
    /// ``StoreHelper/undoRestore(options:hooks:)``.
    package var replaced: String { live + "_Replaced" }
    var journal: String { parent + "/." + name + ".storebackup-restore.json" }
    /// The record of the kept `_Replaced` store (which backup replaced it, when, until when
    /// it is kept); beside it, not inside, so the kept tree stays exactly as it was.
    var replacedRecord: String { parent + "/." + name + ".storebackup-replaced.json" }

    /// The layout around `storesDirectory` (made absolute).
    package init(storesDirectory: String) {
        live = FileSystem.absolutePath(storesDirectory)
    }

    /// Temporary place for a downloaded archive, beside the store (same filesystem, not
    /// inside it), under the scratch name the next command's sweep recognises.
    func downloadPath() -> String {
        ScratchFiles.path(in: parent, purpose: "download", suffix: ".zip")
    }

    /// Folders a restore left beside the store: `_FailedRestore` (a rejected restore, kept
    /// for inspection), and `_Old`/`_New` when no journal explains them. Each with its size
    /// in bytes, for `status` and `recover` to report.
    package func setAsideStores() -> [(path: String, bytes: Int64)] {
        var paths = [failed]
        if !FileSystem.fileExists(journal) { paths += [old, new] }
        return paths.filter(FileSystem.isDirectory).map { ($0, FileSystem.treeSize($0)) }
    }
}
