import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Builds the tree of a chain's newest backup in a new folder: unpacks the full with a
/// ``ChainStepApplication`` (every check of a restore), then applies each incremental in
/// order: removes what its tree no longer holds or holds anew, unpacks its entries with
/// another step (names, links, sizes and SHA-256 checked as for a full), and sets modes and
/// times from the manifest.
///
/// A database of the newest tree that page deltas patch is built in one pass while the
/// backup that last stored it whole is unpacked (``PageDeltaMerge``): each page from the
/// newest delta that holds it, its SHA-256 checked against the newest manifest and its
/// `PRAGMA integrity_check` run while it is written, as a full restore does. Patching it
/// night by night would write the same pages again and again and read the whole file again
/// for its checks. Only a database that a later backup replaces or removes is still patched
/// delta by delta (``PageDeltaReader``) and checked at the end.
/// The chain's links were checked by ``StagedChain/fetch(newest:destination:passwords:stage:)``
/// before this runs. Any failure throws; the caller removes the folder.
struct ChainApplier {
    let chain: StagedChain
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// See ``ExtractionOptions``; a chain is never read without its manifests.
    var options = ExtractionOptions()
    /// Build only the paths this accepts (`extract` of a few files: the selected paths and
    /// the folders on their way); nil builds the whole tree.
    var selection: (@Sendable (String) -> Bool)? = nil
    /// The caller syncs the tree once built (restore, extract): the full's step, most of the
    /// bytes, is then made durable while it unpacks instead of all at the end, where the disk
    /// would work alone.
    var syncsFullAsItUnpacks = false
    /// Damaged-at-the-source databases found (path: SQLite's answer), as each step's.
    let damagedDatabases = Locked<[String: String]>([:])
    /// Each database judged: proven (its `integrity_check` skipped) or checked, and why.
    let databaseVerdicts = Locked<[String: DatabaseVerdict]>([:])

    /// Builds the newest backup's tree into `target` (which must not exist). Returns the
    /// databases of the newest manifest, each checked. What the steps need of the whole
    /// chain (the merges' deltas, the paths changed later) is taken from the manifests first;
    /// then the manifests between the full and the newest are let go and each backup is
    /// opened again (its manifest's SHA-256 checked against the one its link was checked
    /// with) for its own step, while the step before it runs, and released
    /// (``ArchiveReader/release()``) once the next step no longer needs it: a long chain
    /// costs about the memory of three backups, not of all.
    func build(into target: String) throws -> [String] {
        let merged = mergePlans()
        // The newest manifest's proofs are of the databases as the chain leaves them.
        let finalVerdicts = DatabaseProofs.verdicts(
            manifest: chain.newest.manifest, password: chain.newest.reader.password, proofKey: options.proofKey,
            checkAnyway: options.checkDatabases)
        var inputs: [String: MergeInputs] = [:]
        for (path, plan) in merged { inputs[path] = try mergeInputs(of: path, plan: plan) }
        let changed = changedLater()
        let links = chain.links
        let manifestSHA256 = links.map(\.reader.manifestSHA256)
        for link in links.dropFirst().dropLast() { link.reader.release() }
        var readers: [ArchiveReader?] = links.map { _ in nil }
        readers[0] = links[0].reader
        try extract(
            links[0], reader: links[0].reader, index: 0, merged: merged, inputs: inputs, deferred: changed[0], into: target,
            finalVerdicts: finalVerdicts)
        // Files whose content changed since they were last checked against a SHA-256.
        var unchecked = Set<String>()
        let root = try ConfinedTree(opening: target)
        // The backup after the one being applied is opened on the other core meanwhile: its
        // directory and manifest are read again (see above) off the chain's critical path.
        let reopening = { (index: Int) -> BackgroundResult<ArchiveReader>? in
            guard index < links.count - 1 else { return nil }
            let link = links[index], sha256 = manifestSHA256[index]
            return BackgroundResult(name: "storebackup-reopen") { try Self.reopen(link, manifestSHA256: sha256) }
        }
        var ahead = reopening(1)
        defer { ahead?.wait() }
        for index in links.indices.dropFirst() {
            try cancel.throwIfCancelled()
            let link = links[index]
            let reader = try ahead?.value() ?? link.reader
            ahead = reopening(index + 1)
            readers[index] = reader
            guard let previous = readers[index - 1]?.manifest, let manifest = reader.manifest else { continue }
            unchecked.subtract(try makeRoom(in: root, from: previous, for: manifest))
            // Its manifest was the last use of the backup before: its deltas that merges read
            // are open on handles of their own.
            readers[index - 1]?.release()
            readers[index - 1] = nil
            try extract(
                link, reader: reader, index: index, merged: merged, inputs: inputs, deferred: changed[index], into: target,
                finalVerdicts: finalVerdicts)
            for file in manifest.files where file.source == nil { unchecked.remove(file.path) }
            // Built already, in one pass with the backup that stored it whole.
            let rebuilt = { (path: String) in merged[path].map { index > $0.whole } ?? false }
            try applyPageDeltas(of: link, reader: reader, in: root, skipping: rebuilt)
            for file in manifest.files where file.source == "pages" && !rebuilt(file.path) { unchecked.insert(file.path) }
            TestPausePoint.reach("chain-applied")
        }
        let newest = chain.newest
        guard let manifest = newest.manifest else { return [] }
        try finish(
            root, manifest: manifest, unchecked: unchecked, rebuilt: Set(merged.keys), backupName: newest.name,
            verdicts: finalVerdicts)
        return manifest.databases.map(\.path).filter(isSelected)
    }

    /// Opens a backup of the chain again, with the password that opened it, and makes sure
    /// it is still the archive whose link was checked.
    private static func reopen(_ link: ChainLink, manifestSHA256: String?) throws -> ArchiveReader {
        let reader = try ArchiveReader(path: link.path, backupName: link.name, passwords: link.reader.password.map { .fixed($0) })
        guard reader.manifestSHA256 == manifestSHA256 else {
            throw StoreBackupError.corruptArchive(name: link.name, reason: "it changed while its chain was restored")
        }
        return reader
    }

    private func isSelected(_ path: String) -> Bool { selection?(path) ?? true }

    /// A database of the newest tree rebuilt in one pass: the backup (index in the chain)
    /// that last stored it whole, and the backups since whose page deltas patch it, oldest first.
    struct MergePlan {
        let whole: Int
        let deltas: [Int]
    }

    /// The selected databases of the newest tree that a page delta patches since the backup
    /// that last stored them whole (a database there too, so that its step unpacks it as one).
    private func mergePlans() -> [String: MergePlan] {
        guard let newest = chain.newest.manifest else { return [:] }
        // Only the newest tree's databases are looked up: a link's other rows are not kept.
        let databasePaths = Set(newest.databases.map(\.path).filter(isSelected))
        let files = chain.links.map { link in
            Dictionary(
                (link.manifest?.files ?? []).lazy.filter { databasePaths.contains($0.path) }.map { ($0.path, $0) },
                uniquingKeysWith: { first, _ in first })
        }
        var plans: [String: MergePlan] = [:]
        for database in newest.databases where isSelected(database.path) {
            var deltas: [Int] = []
            var whole: Int?
            var index = chain.links.count - 1
            walk: while index >= 0, let file = files[index][database.path] {
                switch file.source {
                case nil:
                    whole = index
                    break walk
                case "pages": deltas.append(index)
                case "base": break
                default: break walk
                }
                index -= 1
            }
            guard let whole, !deltas.isEmpty,
                chain.links[whole].manifest?.databases.contains(where: { $0.path == database.path }) == true
            else { continue }
            plans[database.path] = MergePlan(whole: whole, deltas: deltas.reversed())
        }
        return plans
    }

    /// What the merge that rebuilds a database needs of the chain's manifests: the file as the
    /// newest manifest lists it, its page size, and each delta (oldest first).
    struct MergeInputs {
        let final: Manifest.File
        let pageSize: Int
        let deltas: [PageDeltaMerge.Delta]
    }

    /// The inputs of the merge that rebuilds `path` (see ``MergePlan``), each delta's entry found.
    private func mergeInputs(of path: String, plan: MergePlan) throws -> MergeInputs {
        let newest = chain.newest
        guard let final = newest.manifest?.files.first(where: { $0.path == path }),
            let pageSize = newest.manifest?.databases.first(where: { $0.path == path })?.pageSize
        else {
            throw StoreBackupError.corruptArchive(name: newest.name, reason: "its manifest does not list \(path)")
        }
        let deltas = try plan.deltas.map { index in
            let link = chain.links[index]
            guard let entry = link.reader.pageDeltas[path], let file = link.manifest?.files.first(where: { $0.path == path }),
                link.manifest?.databases.first(where: { $0.path == path })?.pageSize == pageSize
            else {
                throw StoreBackupError.corruptArchive(name: link.name, reason: "the page delta of \(path) is missing")
            }
            return PageDeltaMerge.Delta(reader: link.reader, entry: entry, size: file.size)
        }
        return MergeInputs(final: final, pageSize: pageSize, deltas: deltas)
    }

    /// Unpacks one backup of the chain with a ``ChainStepApplication`` (the tree as the
    /// backup before it left it is in `target`, less what ``makeRoom(in:from:for:)``
    /// removed), rebuilding the databases `merged` plans from this backup, their deltas
    /// opened and their headers checked.
    private func extract(
        _ link: ChainLink, reader: ArchiveReader, index: Int, merged: [String: MergePlan], inputs: [String: MergeInputs],
        deferred: Set<String>, into target: String, finalVerdicts: [String: DatabaseVerdict]
    ) throws {
        let rebuilt = merged.filter { $0.value.whole == index }
        let patches: [String: any DatabasePatch] = try Dictionary(
            uniqueKeysWithValues: rebuilt.keys.compactMap { path in
                try inputs[path].map { input in
                    (
                        path,
                        try PageDeltaMerge(
                            databasePath: path, pageSize: input.pageSize, deltas: input.deltas, final: input.final,
                            backupName: chain.newest.name) as any DatabasePatch
                    )
                }
            })
        var step = ChainStepApplication(
            reader: reader, step: index > 0 ? .incremental : .full,
            deferredChecks: deferred.subtracting(rebuilt.keys), patches: patches,
            selection: selection, options: options,
            cancel: cancel, progress: progress)
        step.patchedVerdicts = finalVerdicts.filter { patches[$0.key] != nil }
        step.durable = syncsFullAsItUnpacks && index == 0
        try step.apply(into: target)
        for (path, patch) in step.patches {
            guard (patch as? PageDeltaMerge)?.isFinished == true else {
                throw StoreBackupError.corruptArchive(name: link.name, reason: "\(path) was not unpacked as a database")
            }
        }
        let damaged = step.damagedDatabases.current
        damagedDatabases.withLock { $0.merge(damaged) { _, new in new } }
        let judged = step.databaseVerdicts.current
        databaseVerdicts.withLock { $0.merge(judged) { _, new in new } }
    }

    /// For each backup of the chain, the databases it holds that a later backup patches,
    /// stores anew or drops (any that not every later backup marks `"base"`): checking their
    /// content as that backup leaves it would be done again (or for nothing) later. One pass
    /// from the newest down, over the paths that are a database somewhere in the chain.
    private func changedLater() -> [Set<String>] {
        let links = chain.links
        let databasePaths = Set(links.flatMap { ($0.manifest?.databases ?? []).map(\.path) })
        var changed = [Set<String>](repeating: [], count: links.count)
        // The database paths every backup after the current one marks "base"; nil: all (none after).
        var keptByAllAfter: Set<String>?
        for index in links.indices.reversed() {
            guard let manifest = links[index].manifest else { continue }
            if let kept = keptByAllAfter { changed[index] = Set(manifest.databases.map(\.path)).subtracting(kept) }
            let kept = Set(manifest.files.lazy.filter { $0.source == "base" && databasePaths.contains($0.path) }.map(\.path))
            keptByAllAfter = keptByAllAfter.map { $0.intersection(kept) } ?? kept
        }
        return changed
    }

    /// Opens every folder for writing, then removes each path of the tree as `previous` left
    /// it that `manifest` no longer holds, holds as another type, or writes anew (links,
    /// FIFOs and files stored whole are entries of the incremental). Returns the paths removed.
    private func makeRoom(in root: ConfinedTree, from previous: Manifest, for manifest: Manifest) throws -> Set<String> {
        // Folders keep their final mode only at the end of each step: a read-only one must
        // take the removals and new entries first.
        for folder in previous.files where folder.type == "directory" && isSelected(folder.path) {
            try root.setDirectoryAttributes(folder.path, permissions: 0o700, modificationTime: folder.mtime)
        }
        try root.setDirectoryAttributes(nil, permissions: 0o700, modificationTime: previous.rootMtime ?? 0)
        var next = [String: Manifest.File](minimumCapacity: manifest.files.count)
        for file in manifest.files { next[file.path] = file }
        var removed = Set<String>()
        for old in previous.files.sorted(by: { $0.path.utf8.count > $1.path.utf8.count }) where isSelected(old.path) {
            let keep: Bool
            if let new = next[old.path] {
                switch new.type {
                case "directory": keep = old.type == "directory"
                case "symlink", "fifo": keep = false
                default: keep = StagedChain.isRegular(old.type) && new.source != nil
                }
            } else {
                keep = false
            }
            if keep { continue }
            try root.remove(old.path)
            removed.insert(old.path)
        }
        return removed
    }

    /// Patches each database the incremental marks `"pages"` from its page delta.
    private func applyPageDeltas(
        of link: ChainLink, reader: ArchiveReader, in root: ConfinedTree, skipping rebuilt: (String) -> Bool
    ) throws {
        guard let manifest = reader.manifest else { return }
        let pageSizes = Dictionary(manifest.databases.map { ($0.path, $0.pageSize) }) { first, _ in first }
        for file in manifest.files where file.source == "pages" && isSelected(file.path) && !rebuilt(file.path) {
            try cancel.throwIfCancelled()
            guard let entry = reader.pageDeltas[file.path], let pageSize = pageSizes[file.path] else {
                throw StoreBackupError.corruptArchive(name: link.name, reason: "the page delta of \(file.path) is missing")
            }
            progress.report(BackupProgress(phase: .extracting, currentFile: file.path))
            let descriptor = try root.openFileForPatching(file.path)
            defer { close(descriptor) }
            let path = root.root + "/" + file.path
            try reader.withEntryStream(entry) { read in
                try PageDeltaReader(backupName: link.name, databasePath: file.path).apply(
                    entrySize: entry.size, pageSize: pageSize, finalSize: file.size, to: descriptor, path: path, read: read)
            }
        }
    }

    /// Gives every file carried over from a base its newest mode and time, then checks what
    /// was patched against the newest manifest (SHA-256, then `integrity_check`; a database
    /// that passes is recorded as it stays, so reload need not check it again). A database
    /// `rebuilt` in one pass has its final mode and time already, set before its check.
    private func finish(
        _ root: ConfinedTree, manifest: Manifest, unchecked: Set<String>, rebuilt: Set<String>, backupName: String,
        verdicts: [String: DatabaseVerdict]
    ) throws {
        for file in manifest.files where file.source != nil && isSelected(file.path) && !rebuilt.contains(file.path) {
            try root.setFileAttributes(file.path, permissions: file.mode & 0o7777, modificationTime: file.mtime)
        }
        let databases = Set(manifest.databases.map(\.path))
        let patched = manifest.files.filter { unchecked.contains($0.path) && isSelected($0.path) }
        let cancel = self.cancel, progress = self.progress, damagedDatabases = self.damagedDatabases
        let databaseVerdicts = self.databaseVerdicts
        let acceptDamagedDatabases = options.acceptDamagedDatabases
        // One database per thread: each is read once for its SHA-256, then checked.
        try WorkerPool.forEach(patched, name: "storebackup-check", width: min(max(1, patched.count), WorkerPool.cores), cancel: cancel) {
            file in
            try cancel.throwIfCancelled()
            progress.report(BackupProgress(phase: .checking, currentFile: file.path), force: true)
            let descriptor = try root.openFileForReading(file.path)
            defer { close(descriptor) }
            let path = EscapedName.escapedRoot(root.root) + "/" + file.path
            var hasher = SHA256()
            var info = stat()
            guard fstat(descriptor, &info) == 0 else { throw StoreBackupError.io(path: path, operation: "stat", errno: errno) }
            let size = Int64(info.st_size)
            guard size == file.size else { throw StoreBackupError.checksumMismatch(name: backupName, entry: file.path) }
            try FileDigest.read(descriptor: descriptor, path: path, offset: 0, length: size) { _, bytes in
                hasher.update(bufferPointer: bytes)
            }
            guard FileDigest.hex(hasher.finalize()) == file.sha256 else {
                throw StoreBackupError.checksumMismatch(name: backupName, entry: file.path)
            }
            guard databases.contains(file.path) else { return }
            let verdict = verdicts[file.path] ?? .checked(reason: "the backup holds no proof for it")
            databaseVerdicts.withLock { $0[file.path] = verdict }
            if verdict == .proven {
                CheckedDatabases.record(path)
                return
            }
            do { try IntegrityCheck.run(path) } catch let error as StoreBackupError where DamageJudge.isDamage(error) {
                let answer = DamageJudge.sqliteAnswer(error)
                damagedDatabases.withLock { $0[file.path] = answer }
                guard acceptDamagedDatabases else {
                    throw StoreBackupError.databaseDamagedAtSource(name: backupName, databases: [file.path], result: answer)
                }
            }
        }
    }
}
