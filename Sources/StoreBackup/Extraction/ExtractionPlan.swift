import Foundation

extension Extractor {
    /// Bytes the files take on disk: their declared sizes plus a block per entry,
    /// saturating instead of overflowing on absurd declared sizes.
    static func diskUsage(of files: [ArchiveEntry], entryCount: Int) -> Int64 {
        var total = Int64(entryCount) * 4096
        for file in files {
            let (sum, overflow) = total.addingReportingOverflow(max(0, file.size))
            total = overflow ? Int64.max : sum
        }
        return total
    }

    /// Reads every link's target (raw bytes, escaped); where each leads is judged by
    /// ``ArchiveTree``, through the archive's other links.
    func readLinks(manifestByPath: [String: Manifest.File]) throws -> [(entry: ArchiveEntry, target: String)] {
        try reader.entries.filter { $0.kind == .symlink }.map { link in
            let bytes = try reader.readSmallEntry(index: link.index, limit: ArchiveLimits.maxLinkTargetBytes)
            let target = EscapedName.escape(bytes)
            guard !bytes.isEmpty, !bytes.contains(0) else {
                throw StoreBackupError.unsafeArchiveEntry(name: reader.backupName, entry: "\(link.path) -> \(target)")
            }
            if let expected = manifestByPath[link.path]?.linkTarget, expected != target {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: link.path)
            }
            return (link, target)
        }
    }

    /// Every archive entry must be in the manifest with the same kind and size, and every
    /// manifest entry in the archive: a missing or extra file is damage.
    func crossCheckManifest() throws -> [String: Manifest.File] {
        guard let manifest = reader.manifest else { return [:] }
        var byPath: [String: Manifest.File] = [:]
        for file in manifest.files {
            guard byPath.updateValue(file, forKey: file.path) == nil else {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "its manifest lists \(file.path) twice")
            }
        }
        for entry in reader.entries {
            guard let expected = byPath[entry.path] else {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path) is not in its manifest")
            }
            let expectedKind: ArchiveEntry.Kind =
                switch expected.type {
                case "directory": .directory
                case "symlink": .symlink
                case "fifo": .fifo
                default: .file
                }
            guard expectedKind == entry.kind else {
                throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(entry.path) has the wrong type")
            }
            // The central directory and the manifest must agree on the size: it bounds the write.
            if entry.kind == .file && expected.size != entry.size {
                throw StoreBackupError.checksumMismatch(name: reader.backupName, entry: entry.path)
            }
        }
        let present = Set(reader.entries.map(\.path))
        // A file whose content is elsewhere in the chain (`source`) has no entry, and one
        // that has an entry must not claim to be elsewhere.
        if let misplaced = manifest.files.first(where: { $0.source != nil && present.contains($0.path) }) {
            throw StoreBackupError.corruptArchive(
                name: reader.backupName, reason: "\(misplaced.path) has an entry although its manifest says its content is in the base")
        }
        // Such a file's path is no entry name ArchiveReader checked: check it here, as one.
        if let unsafe = manifest.files.first(where: { $0.source != nil && !ArchiveReader.isSafeRelativePath($0.path) }) {
            throw StoreBackupError.unsafeArchiveEntry(name: reader.backupName, entry: unsafe.path)
        }
        if let unknown = manifest.files.first(where: { $0.source.map { $0 != "base" && $0 != "pages" } ?? false }) {
            throw StoreBackupError.corruptArchive(
                name: reader.backupName, reason: "\(unknown.path) has an unknown source \"\(unknown.source ?? "")\"")
        }
        if let missing = manifest.files.first(where: { $0.source == nil && !present.contains($0.path) }) {
            throw StoreBackupError.corruptArchive(name: reader.backupName, reason: "\(missing.path) is missing")
        }
        if let stray = manifest.databases.first(where: { byPath[$0.path].map { $0.type != "file" && $0.type != "database" } ?? true }) {
            throw StoreBackupError.corruptArchive(
                name: reader.backupName, reason: "its manifest names \(stray.path) as a database but has no such file")
        }
        return byPath
    }
}
