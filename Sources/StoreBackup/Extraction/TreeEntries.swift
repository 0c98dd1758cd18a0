import Foundation

/// The folders, FIFOs and links an extraction makes around its files, as each driver chose
/// them: the folders before the files go into them, the rest once the files are written.
struct TreeEntries {
    var directories: [ArchiveEntry]
    var fifos: [ArchiveEntry]
    var links: [(entry: ArchiveEntry, target: String)]

    /// Makes every folder, parents first.
    func makeDirectories(in root: ConfinedTree) throws {
        for directory in directories.sorted(by: { $0.path < $1.path }) {
            try root.makeDirectories(directory.path)
        }
    }

    /// FIFOs, then links last (their targets exist by now), then every folder's mode and
    /// time, deepest first, so that writing into a folder does not change its time again.
    /// The root takes the manifest's mode and time.
    func finish(in root: ConfinedTree, manifest: Manifest?) throws {
        for fifo in fifos {
            try root.createFIFO(fifo.path, permissions: fifo.permissions, modificationTime: fifo.modificationTime)
        }
        for (link, destination) in links {
            try root.createLink(link.path, target: destination, modificationTime: link.modificationTime)
        }

        for directory in directories.sorted(by: { $0.path.count > $1.path.count }) {
            try root.setDirectoryAttributes(
                directory.path, permissions: directory.permissions, modificationTime: directory.modificationTime)
        }
        let rootMode: UInt32 = manifest?.rootMode ?? 0o755
        let rootTime: Int64 = manifest?.rootMtime ?? Int64(Date().timeIntervalSince1970)
        try root.setDirectoryAttributes(nil, permissions: rootMode & 0o7777, modificationTime: rootTime)
    }
}
