import Foundation

extension Extractor {
    /// FIFOs, then links last (their targets exist by now), then every folder's mode and
    /// time, deepest first, so that writing into a folder does not change its time again.
    func finishTree(
        _ root: ConfinedTree, links: [(entry: ArchiveEntry, target: String)], fifos: [ArchiveEntry],
        directories: [ArchiveEntry]
    ) throws {
        for fifo in fifos {
            try root.createFIFO(fifo.path, permissions: fifo.permissions, modificationTime: fifo.modificationTime)
        }
        if !verifyOnly {
            for (link, destination) in links where isSelected(link.path) {
                try root.createLink(link.path, target: destination, modificationTime: link.modificationTime)
            }
        }

        for directory in directories.sorted(by: { $0.path.count > $1.path.count }) {
            try root.setDirectoryAttributes(
                directory.path, permissions: directory.permissions, modificationTime: directory.modificationTime)
        }
        let rootMode: UInt32 = reader.manifest?.rootMode ?? 0o755
        let rootTime: Int64 = reader.manifest?.rootMtime ?? Int64(Date().timeIntervalSince1970)
        try root.setDirectoryAttributes(nil, permissions: rootMode & 0o7777, modificationTime: rootTime)
    }
}
