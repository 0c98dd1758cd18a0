import Foundation

/// The folders a restore works with, all beside the live stores directory so every
/// step is a rename on one filesystem: `<name>_New` (the unpacked backup),
/// `<name>_Old` (the previous store while the new one is tried) and
/// `<name>_FailedRestore` (a restored store that failed to load).
public struct StoreLayout: Sendable {
    /// The live stores directory (absolute).
    public let live: String
    /// The folder holding the live store and its `_New`/`_Old`/`_FailedRestore` siblings.
    public var parent: String { FileSystem.parentDirectory(of: live) }
    /// The live store's folder name.
    public var name: String { FileSystem.lastComponent(of: live) }
    /// Where a restore unpacks and checks the backup before swapping it in.
    public var new: String { live + "_New" }
    /// Where the previous store waits while the restored one is reloaded.
    public var old: String { live + "_Old" }
    /// Where a restored store that the app rejected (its `reload` threw) is kept for inspection.
    public var failed: String { live + "_FailedRestore" }
    var journal: String { parent + "/." + name + ".storebackup-restore.json" }

    /// The layout around `storesDirectory` (made absolute).
    public init(storesDirectory: String) {
        live = FileSystem.absolutePath(storesDirectory)
    }

    /// Temporary place for a downloaded archive, beside the store (same filesystem, not inside it).
    func downloadPath() -> String {
        parent + "/." + name + ".storebackup-download-\(getpid()).zip"
    }
}
