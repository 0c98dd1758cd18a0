import Foundation

/// The points a merge reads, each opened (decrypted with the chain's password) and its link
/// checked before anything is written: the first onto the merge's base, each next onto the
/// one before (``ChainLinkRule``), all incrementals of one chain (the same encryption and
/// page-hash salt as the base).
struct PointMergeParts {
    /// One opened point, and what its manifest says, looked up by path when needed.
    final class Part {
        let name: String
        let reader: ArchiveReader
        let manifest: Manifest

        init(name: String, reader: ArchiveReader, manifest: Manifest) {
            self.name = name
            self.reader = reader
            self.manifest = manifest
        }

        /// Its databases by path.
        private(set) lazy var databases: [String: Manifest.Database] = Dictionary(
            manifest.databases.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        /// Its store entries by path.
        private(set) lazy var entries: [String: ArchiveEntry] = Dictionary(
            reader.entries.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        /// Its own entries (page maps among them) by escaped entry name.
        private(set) lazy var ownEntries: [String: ArchiveEntry] = Dictionary(
            reader.ownEntries.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Oldest first.
    let parts: [Part]
    /// Where each file of the newest part takes its content from.
    let plan: PointMergePlan

    var newest: Part { parts[parts.count - 1] }

    /// Opens the archives at `paths` (oldest first) and checks that they form the chain the
    /// merge needs on `base`. Each is named by its file name.
    static func open(
        _ paths: [String], onto base: PointMergeBase, password: BackupPassword?, cancel: CancellationFlag
    ) throws -> PointMergeParts {
        var previous = (name: base.name, manifest: base.manifest, sha256: base.manifestSHA256)
        var plan = PointMergePlan()
        var parts: [Part] = []
        for (index, path) in paths.enumerated() {
            try cancel.throwIfCancelled()
            let name = FileSystem.lastComponent(of: path)
            func broken(_ reason: String) -> StoreBackupError { .brokenChain(name: name, reason: reason) }
            let reader = try ArchiveReader(path: path, backupName: name, passwords: password.map { .fixed($0) })
            guard let manifest = reader.manifest, let sha256 = reader.manifestSHA256 else {
                throw StoreBackupError.corruptArchive(name: name, reason: "it has no manifest")
            }
            guard manifest.kind == "incremental", manifest.base != nil else { throw broken("it is not an incremental backup") }
            guard (reader.password != nil) == (password != nil) else {
                throw broken(password == nil ? "it is encrypted" : "it is not encrypted, and the merge is")
            }
            guard manifest.hashSalt == base.manifest.hashSalt else {
                throw broken("its page hashes are not keyed as those of \"\(base.name)\"")
            }
            try ChainLinkRule.check(
                manifest, named: name, hasPageDelta: { reader.pageDeltas[$0] != nil }, base: previous.name,
                baseManifest: previous.manifest, baseManifestSHA256: previous.sha256)
            try plan.add(manifest, part: index, name: name)
            parts.append(Part(name: name, reader: reader, manifest: manifest))
            previous = (name, manifest, sha256)
        }
        return PointMergeParts(parts: parts, plan: plan)
    }
}
