import Foundation

/// The folders a restore works with, all beside the live stores directory so every
/// step is a rename on one filesystem: `<name>_New` (the unpacked backup),
/// `<name>_Old` (the previous store while the new one is tried) and
/// `<name>_FailedRestore` (a restored store that failed to load).
public struct StoreLayout: Sendable {
    public let live: String
    public var parent: String { FileSystem.parentDirectory(of: live) }
    public var name: String { FileSystem.lastComponent(of: live) }
    public var new: String { live + "_New" }
    public var old: String { live + "_Old" }
    public var failed: String { live + "_FailedRestore" }
    var journal: String { parent + "/." + name + ".storebackup-restore.json" }

    public init(storesDirectory: String) {
        live = FileSystem.absolutePath(storesDirectory)
    }

    /// Temporary place for a downloaded archive, beside the store (same filesystem, not inside it).
    func downloadPath() -> String {
        parent + "/." + name + ".storebackup-download-\(getpid()).zip"
    }
}
