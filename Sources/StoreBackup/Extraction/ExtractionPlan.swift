import Foundation

/// The checks made before anything is written, over the whole archive whatever a driver then
/// writes of it. Every name was checked by ``ArchiveReader`` (raw bytes, no control
/// characters, no `..`, no absolute paths); here every entry must be in the manifest with the
/// same type and size, every link's target is resolved through the archive's other links and
/// must stay inside (``ArchiveTree``), an archive without a manifest is refused unless
/// allowed, and, once the driver knows what it writes, the declared sizes must fit in the
/// target file system with a reserve left for the app (``FreeSpace``).
struct ExtractionPlan {
    let reader: ArchiveReader
    /// The manifest's files by path; empty for an archive without a manifest.
    let manifestByPath: ManifestLookup
    /// Every link of the archive with its target (raw bytes, escaped), checked.
    let links: [(entry: ArchiveEntry, target: String)]

    /// What an archive without a manifest leaves unchecked, for the caller to say.
    static let unverifiedWarning =
        "the backup has no manifest: only CRCs and PRAGMA integrity_check were checked (no SHA-256 of any file, no list of what should be there)"

    /// Checks `reader`'s archive. `incremental`: it is read as a step of its chain, onto the
    /// tree its base left; a full backup is refused there, and an incremental anywhere else
    /// (alone it is only part of a store).
    init(reader: ArchiveReader, incremental: Bool, options: ExtractionOptions) throws {
        self.reader = reader
        if let manifest = reader.manifest, manifest.isIncremental != incremental {
            throw incremental
                ? StoreBackupError.corruptArchive(
                    name: reader.backupName, reason: "it is a full backup where its chain needs an incremental")
                : StoreBackupError.brokenChain(
                    name: reader.backupName,
                    reason: "it holds only what changed since \(manifest.base?.name ?? "its base"), and was read without its chain")
        }
        let manifestByPath = try Self.crossCheckManifest(reader)
        let links = try Self.readLinks(reader, manifestByPath: manifestByPath)
        // With a manifest, its rows are the entries (cross-checked) and the files whose content
        // is in the base (in the tree too: nothing may sit beneath them).
        let kinds: ArchiveTree.Kinds
        if reader.manifest != nil {
            kinds = .manifest(manifestByPath)
        } else {
            var table: [String: ArchiveEntry.Kind] = [:]
            for entry in reader.entries { table[entry.path] = entry.kind }
            kinds = .table(table)
        }
        var tree = ArchiveTree(
            kinds: kinds, linkTargets: Dictionary(links.map { ($0.entry.path, $0.target) }) { first, _ in first },
            backupName: reader.backupName)
        try tree.check(recordedOutside: Set(reader.manifest?.outsideLinks ?? []), allowOutside: options.allowOutsideLinks)
        if reader.manifest == nil && !options.allowUnverified {
            throw StoreBackupError.unverifiableBackup(name: reader.backupName)
        }
        self.manifestByPath = manifestByPath
        self.links = links
    }

    /// Refuses to write `files` into `target` (a folder to be made, or being built) when
    /// they would not fit beside the app.
    func checkFreeSpace(writing files: some Sequence<ArchiveEntry>, into target: String) throws {
        try FreeSpace.check(
            needed: Self.diskUsage(of: files, entryCount: reader.entries.count),
            in: FileSystem.parentDirectory(of: target), backupName: reader.backupName)
    }

    /// Databases as the manifest names them; without a manifest, none is known before it
    /// is read (verify decides by a file's first bytes, ``EntryWriter``; the others search
    /// by header once all is written, ``UnlistedDatabases``).
    func isDatabase(_ entry: ArchiveEntry) -> Bool {
        guard let manifest = reader.manifest else { return false }
        return manifest.databases.contains { $0.path == entry.path }
    }

    /// Bytes the files take on disk: their declared sizes plus a block per entry,
    /// saturating instead of overflowing on absurd declared sizes.
    static func diskUsage(of files: some Sequence<ArchiveEntry>, entryCount: Int) -> Int64 {
        var total = Int64(entryCount) * 4096
        for file in files {
            let (sum, overflow) = total.addingReportingOverflow(max(0, file.size))
            total = overflow ? Int64.max : sum
        }
        return total
    }

    /// Reads every link's target (raw bytes, escaped); where each leads is judged by
    /// ``ArchiveTree``, through the archive's other links.
    private static func readLinks(
        _ reader: ArchiveReader, manifestByPath: ManifestLookup
    ) throws -> [(entry: ArchiveEntry, target: String)] {
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
    private static func crossCheckManifest(_ reader: ArchiveReader) throws -> ManifestLookup {
        guard let manifest = reader.manifest else { return .empty }
        return try ManifestLookup.crossChecked(manifest, entries: reader.entries, backupName: reader.backupName)
    }
}
