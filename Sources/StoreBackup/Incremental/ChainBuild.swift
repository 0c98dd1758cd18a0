import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One backup in a chain, from the decision to the saved state: ``prepare(items:snapshots:scratchDirectory:workers:cancel:)``
/// scans the store against the chain state and gives ``ArchiveWriter`` the parts of a
/// format-3 full or incremental; ``commit(name:manifest:archiveSize:)`` saves the new state
/// once the backup is published; ``discard()`` removes what a failed run made.
///
/// Used by one thread at a time (create's blocking thread, then the publishing task).
final class ChainBuild: @unchecked Sendable {
    let folder: ChainFolder
    let policy: IncrementalPolicy
    let password: BackupPassword?
    /// The destination's backups, listed before the store was locked (nil: it cannot list).
    let listing: [BackupListing]?
    /// Further destinations the same archive is published to, with their listings: an
    /// incremental only when each holds the same chain.
    let mirrors: [(folder: ChainFolder, listing: [BackupListing]?)]
    /// Made by ``prepare`` under the store's lock, from the chain state.
    private(set) var decision: IncrementalPlan.Decision = .full(reason: "not prepared")

    /// Set by ``prepare``: the new complete page maps (scratch files in the state folder)
    /// by database path, the files' stats, the chain fields, the scratch files to remove.
    private var maps: [String: String] = [:]
    /// The quick maps written, by database path (scratch files in the state folder).
    private var quickMaps: [String: String] = [:]
    private var databases: [ChainState.Database] = []
    private var stats: [String: FileStat] = [:]
    private var scratch: [String] = []
    private var hasher = PageHasher.plain
    private var hashSalt: String?
    /// The base's manifest (incrementals), from the state's checked copy.
    private var baseManifest: Manifest?
    /// The databases this incremental patches with a page delta it holds.
    private var patchedPaths: Set<String> = []
    /// The time the decision is made at (the helper's clock).
    let now: Date
    /// When the destination was last listed for this chain: now, or the cached chain's time.
    var listedAt: Date?
    /// The store as it looked before it was scanned (``recordFingerprint(storesDirectory:)``).
    private var fingerprint: StoreFingerprint?

    init(
        folder: ChainFolder, policy: IncrementalPolicy, password: BackupPassword?, listing: [BackupListing]?,
        mirrors: [(folder: ChainFolder, listing: [BackupListing]?)] = [], now: Date = Date()
    ) {
        self.now = now
        self.folder = folder
        self.mirrors = mirrors
        self.policy = policy
        self.password = password
        self.listing = listing
    }

    /// Whether the backup being built is an incremental one (known after ``decide()``).
    var isIncremental: Bool {
        if case .incremental = decision { return true }
        return false
    }

    /// Why this backup is a full one (nil for an incremental).
    var fullReason: String? {
        if case .full(let reason) = decision { return reason }
        return nil
    }

    /// Whether this point's databases are due a check (a point whose chain was last proven
    /// `interval` ago or more, or never); false for a full, which is always checked.
    func proofDue(every interval: TimeInterval) -> Bool {
        guard case .incremental(let state, _, _) = decision else { return false }
        guard let proven = state.provenAt else { return true }
        return now.timeIntervalSince(proven) >= interval
    }

    /// The base's name (incrementals).
    var baseName: String? {
        if case .incremental(let state, _, _) = decision { return state.backupName }
        return nil
    }

    /// Takes the store's fingerprint before anything of it is read, with the databases the
    /// chain knows: a change after this is either in the backup or shows in the next one.
    /// Without one (it failed), the state keeps none and the next run makes a point.
    func recordFingerprint(storesDirectory: String) {
        let known = Set(folder.peek()?.databases.map(\.path) ?? [])
        fingerprint = try? StoreFingerprint.take(storesDirectory: storesDirectory, databases: known)
    }

    func prepare(
        items: [StoreItem], snapshots: [String: DatabaseSnapshot], scratchDirectory: String, workers: Int,
        cancel: CancellationFlag
    ) throws -> ArchiveChainParts {
        if !decided { try decide() }
        let parts = try buildParts(
            items: items, snapshots: snapshots, scratchDirectory: scratchDirectory, workers: workers, cancel: cancel)
        TestPausePoint.reach("chain-scanned")
        return parts
    }

    private var decided = false

    /// Decides, from the chain state, the policy and the listings, whether this backup is an
    /// incremental (and on which base) before the store is read, so create knows what it
    /// makes (``isIncremental``). ``prepare(items:snapshots:scratchDirectory:workers:cancel:)``
    /// may still turn it into a full when the changes are too large.
    func decide() throws {
        decided = true
        try folder.prepare()
        decision = IncrementalPlan.decide(policy: policy, loaded: folder.load(), password: password, listing: listing, now: now)
        if case .incremental(let state, _, _) = decision {
            // What the incremental is proven against before it is published (``prove(_:)``).
            do { baseManifest = try folder.baseManifest(of: state) } catch {
                decision = .full(reason: "\(error)")
            }
        }
        if case .incremental(let state, _, _) = decision {
            for mirror in mirrors {
                // Simple and safe: the same base, checked the same way, at every destination.
                let held: Bool
                if case .state(let theirs, _) = mirror.folder.load() {
                    held =
                        theirs.backupName == state.backupName && theirs.manifestSHA256 == state.manifestSHA256
                        && mirror.listing?.contains { $0.name == state.backupName && $0.size == theirs.archiveSize } == true
                } else {
                    held = false
                }
                if !held {
                    decision = .full(reason: "\(mirror.folder.destination) does not hold the base \(state.backupName)")
                    break
                }
                if let listing = mirror.listing, let broken = IncrementalPlan.brokenChain(of: state, in: listing) {
                    decision = .full(reason: "at \(mirror.folder.destination), \(broken)")
                    break
                }
            }
        }
    }

    private func buildParts(
        items: [StoreItem], snapshots: [String: DatabaseSnapshot], scratchDirectory: String, workers: Int,
        cancel: CancellationFlag
    ) throws -> ArchiveChainParts {
        var base: (state: ChainState, files: [String: FileRecord])?
        switch decision {
        case .incremental(let state, let files, let chainHasher):
            hasher = chainHasher
            hashSalt = state.hashSalt
            base = (state, files)
        case .full:
            if let password {
                let salt = PageHasher.newSalt()
                hasher = PageHasher.keyed(password: password, salt: salt)
                hashSalt = FileDigest.hex(salt)
            }
        }

        let files = items.filter { $0.kind == .file }
        let changes = try ChangeDetector.detect(files: files, known: base?.files, workers: workers, cancel: cancel)
        stats = changes.stats
        // Only what the base's manifest records at the same path, as a file of the same
        // size and SHA-256, is taken from the base; anything else goes in whole.
        var baseEntries: [String: Manifest.File] = [:]
        for entry in baseManifest?.files ?? [] { baseEntries[entry.path] = entry }

        var parts = ArchiveChainParts(kind: "full", base: nil, chainLength: 0, hashSalt: hashSalt, pageMaps: [])
        var deltaBytes: Int64 = 0
        var storeBytes: Int64 = 0
        for item in files {
            storeBytes += item.size
            if let record = changes.unchanged[item.relativePath], let entry = baseEntries[item.relativePath],
                entry.type == "file", entry.size == record.stat.size, entry.sha256 == record.sha256
            {
                parts.notStored[item.relativePath] = .init(size: record.stat.size, sha256: record.sha256, source: "base")
            } else {
                deltaBytes += item.size
            }
        }

        let scan = DatabasePageScan(hasher: hasher, workers: workers, cancel: cancel)
        var fullMaps: [ArchiveChainParts.ExtraEntry] = []
        var patched: [DatabaseSnapshot] = []
        for item in items where item.kind == .database {
            guard let snapshot = snapshots[item.relativePath] else { continue }
            storeBytes += snapshot.size
            let mapPath = folder.scratchPath(purpose: "pagemap")
            maps[item.relativePath] = mapPath
            scratch.append(mapPath)
            databases.append(
                .init(path: item.relativePath, pageSize: snapshot.pageSize, pages: snapshot.pageCount, map: "", pagesHashedAt: now))
            // Plain chains keep a quick map: a keyed chain's maps say nothing about the pages.
            let quickPath = hasher.kind == .sha256 ? folder.scratchPath(purpose: "quickmap") : nil
            if let quickPath {
                quickMaps[item.relativePath] = quickPath
                scratch.append(quickPath)
            }
            let entryName = ArchiveChainParts.entryName(for: item.relativePath)
            // Patched only when the base's manifest holds this database with the same page size.
            let inBase =
                baseEntries[item.relativePath].map { ChainLinkRule.isRegular($0.type) } == true
                && baseManifest?.databases.contains { $0.path == item.relativePath && $0.pageSize == snapshot.pageSize } == true
            let previous =
                inBase ? base?.state.databases.first { $0.path == item.relativePath && $0.pageSize == snapshot.pageSize } : nil
            // A map that cannot be read now (it was checked when the state was loaded): stored whole.
            let baseMap = previous.flatMap { try? PageMapFile(path: folder.path + "/" + $0.map) }
            guard let baseMap, baseMap.hashKind == hasher.kind, baseMap.pageSize == snapshot.pageSize else {
                // A full, or a database new to the chain or with a new page size: stored whole.
                _ = try scan.scan(
                    snapshot, mapPath: mapPath, delta: nil, wholeFileSHA256: false,
                    quick: quickPath.map { .init(base: nil, outputPath: $0) })
                deltaBytes += snapshot.size
                let size = try FileSystem.lstatInfo(mapPath).st_size
                fullMaps.append(.init(name: Self.pageMapPrefix + entryName, path: mapPath, size: Int64(size)))
                parts.pageMaps.append(.init(path: item.relativePath, hash: hasher.kind.manifestName, complete: true))
                continue
            }
            let deltaPath = ScratchFiles.path(in: scratchDirectory, purpose: "pages")
            let changedMapPath = ScratchFiles.path(in: scratchDirectory, purpose: "pagemap")
            scratch += [deltaPath, changedMapPath]
            let quickBase =
                quickPath == nil ? nil : trustedQuickMap(previous, pageSize: snapshot.pageSize).map { (quick: $0, map: baseMap) }
            let result = try scan.scan(
                snapshot, mapPath: mapPath,
                delta: .init(base: baseMap, deltaPath: deltaPath, changedMapPath: changedMapPath), wholeFileSHA256: true,
                quick: quickPath.map { .init(base: quickBase, outputPath: $0) })
            if quickBase != nil, result.pagesHashed < snapshot.pageCount {
                // Some hashes were carried over: every page was last hashed when the base's were.
                databases[databases.count - 1].pagesHashedAt = previous?.pagesHashedAt
            }
            patched.append(snapshot)
            deltaBytes += result.deltaSize ?? 0
            parts.notStored[item.relativePath] = .init(size: snapshot.size, sha256: result.sha256 ?? "", source: "pages")
            patchedPaths.insert(item.relativePath)
            parts.extraEntries.append(
                .init(name: Self.pagesPrefix + entryName, path: deltaPath, size: result.deltaSize ?? 0, patches: item.relativePath))
            parts.extraEntries.append(
                .init(name: Self.pageMapPrefix + entryName, path: changedMapPath, size: result.changedMapSize ?? 0))
            parts.pageMaps.append(.init(path: item.relativePath, hash: hasher.kind.manifestName, complete: false))
        }
        parts.extraEntries += fullMaps

        if base != nil, Double(deltaBytes) > policy.maxDeltaShare * Double(max(storeBytes, 1)) {
            // Not worth a link in the chain: the maps are complete already, so make a full.
            decision = .full(
                reason: "the changes (\(deltaBytes) bytes) exceed \(Int(policy.maxDeltaShare * 100)) % of the store (\(storeBytes) bytes)")
            if password != nil {
                // A full starts a chain with its own salt: the maps must be hashed again.
                discard()
                maps = [:]
                quickMaps = [:]
                databases = []
                return try buildParts(
                    items: items, snapshots: snapshots, scratchDirectory: scratchDirectory, workers: workers, cancel: cancel)
            }
            var full = ArchiveChainParts(kind: "full", base: nil, chainLength: 0, hashSalt: hashSalt, pageMaps: [])
            for database in databases {
                let mapPath = maps[database.path]!
                let size = try FileSystem.lstatInfo(mapPath).st_size
                full.extraEntries.append(
                    .init(
                        name: Self.pageMapPrefix + ArchiveChainParts.entryName(for: database.path), path: mapPath,
                        size: Int64(size)))
                full.pageMaps.append(.init(path: database.path, hash: hasher.kind.manifestName, complete: true))
            }
            return full
        }
        if let base {
            // Read once, and not again by the archive: let writers and checkpoints go on (once
            // its check, when the point is proven, has read it too).
            for snapshot in patched { snapshot.readingFinished() }
            parts.kind = "incremental"
            parts.chainLength = base.state.chainLength + 1
            parts.base = Manifest.Base(
                name: base.state.backupName, manifestSHA256: base.state.manifestSHA256, createdAt: base.state.createdAt)
        } else {
            parts.notStored = [:]
        }
        return parts
    }

    /// Whether the incremental just built (`manifest`) records the store exactly as its base
    /// does, but for the times that move without a change of content: a database's mtime (a
    /// checkpoint writes the file) and folders' times (a `-wal` comes and goes), which the
    /// store's fingerprint leaves out as well.
    func isUnchanged(_ manifest: Manifest) -> Bool {
        guard isIncremental, let base = baseManifest, manifest.files.count == base.files.count,
            manifest.rootMode == base.rootMode
        else { return false }
        var baseFiles: [String: Manifest.File] = [:]
        for file in base.files { baseFiles[file.path] = file }
        for file in manifest.files {
            guard let old = baseFiles[file.path], old.type == file.type, old.mode == file.mode, old.size == file.size,
                old.sha256 == file.sha256, old.linkTarget == file.linkTarget
            else { return false }
            if file.type != "database" && file.type != "directory" && old.mtime != file.mtime { return false }
        }
        return true
    }

    /// Records in the state, instead of a backup, that this run read the store and found it
    /// unchanged (``isUnchanged(_:)``): its fingerprint and time, so the next run trusts them.
    func recordUnchanged() throws {
        guard case .incremental(let state, _, _) = decision else { return }
        try folder.recordScan(of: state, fingerprint: fingerprint, at: now)
    }

    /// The base's quick map of a database, when it may stand in for hashing its pages: it
    /// matched its checksum, has the page size, and every page was hashed with SHA-256
    /// within the policy's `full-scan-every` (``ChainState/Database/pagesHashedAt``).
    private func trustedQuickMap(_ previous: ChainState.Database?, pageSize: Int) -> QuickPageMapFile? {
        guard let previous, let name = previous.quickMap, let hashedAt = previous.pagesHashedAt,
            now.timeIntervalSince(hashedAt) < policy.fullScanEvery, now >= hashedAt,
            let quick = try? QuickPageMapFile(path: folder.path + "/" + name),
            quick.pageSize == pageSize, quick.pages == previous.pages
        else { return nil }
        return quick
    }

    // The names readers expect (ArchiveNames), as bytes to prefix raw entry names with.
    static let pagesPrefix = Array(ArchiveNames.pageDeltaPrefix.utf8)
    static let pageMapPrefix = Array(ArchiveNames.pageMapPrefix.utf8)

    /// Saves the chain state at each destination the backup was published to (its name and
    /// size there); destinations it did not reach keep their state (their next backup is a full).
    /// `spooled`: the one destination could not be reached and the backup waits in the spool
    /// (``ChainFolder/spool(file:as:)``) under `published[0].name`.
    func commit(
        manifest: Manifest, published: [(folder: ChainFolder, name: String, size: Int64)], unlocked: Bool? = nil,
        spooled: Bool = false
    ) throws {
        guard let first = published.first else { return }
        let saved = try commit(
            to: first.folder, name: first.name, manifest: manifest, archiveSize: first.size, unlocked: unlocked, spooled: spooled)
        for other in published.dropFirst() {
            try other.folder.saveCopy(of: saved, from: first.folder, name: other.name, size: other.size)
        }
    }

    private func commit(
        to folder: ChainFolder, name: String, manifest: Manifest, archiveSize: Int64, unlocked: Bool?, spooled: Bool
    ) throws -> ChainState {
        let manifestBytes = try manifest.encoded()
        let manifestSHA256 = FileDigest.hex(SHA256.hash(data: manifestBytes))
        var fullCreatedAt = manifest.createdAt
        var links: [PublishedLink]? = []
        var waiting: [PublishedLink] = []
        var provenAt: Date?
        if case .incremental(let state, _, _) = decision {
            fullCreatedAt = state.fullCreatedAt
            links = state.links
            waiting = state.spooled ?? []
            provenAt = state.provenAt
        }
        if !manifest.databases.isEmpty, manifest.databases.allSatisfy({ $0.proof != nil }) { provenAt = manifest.createdAt }
        links?.append(PublishedLink(name: name, size: archiveSize))
        if spooled { waiting.append(PublishedLink(name: name, size: archiveSize)) }
        var files: [(path: String, record: FileRecord)] = []
        for file in manifest.files where file.type == "file" {
            guard let stat = stats[file.path], let sha256 = file.sha256 else { continue }
            files.append((file.path, FileRecord(stat: stat, sha256: sha256)))
        }
        var state = ChainState(
            destination: folder.destination, backupName: name, manifestSHA256: manifestSHA256, createdAt: manifest.createdAt,
            archiveSize: archiveSize, chainLength: manifest.chainLength ?? 0, fullCreatedAt: fullCreatedAt,
            encrypted: password != nil, hashSalt: hashSalt, keyCheck: hasher.keyCheck, filesList: "", databases: databases,
            fingerprint: fingerprint, links: links, pointsUnlocked: unlocked, listedAt: listedAt,
            spooled: waiting.isEmpty ? nil : waiting)
        state.provenAt = provenAt
        try folder.prepare()
        return try folder.save(state, files: files, maps: maps, quickMaps: quickMaps, manifest: manifestBytes)
    }

    /// Proves an incremental before it is published, by the rules verify and restore apply to
    /// a link of a chain (``ChainLinkRule``),
    /// against the base's manifest from the state's checked copy. A full needs no base.
    /// Throws when the archive would not restore: nothing is published then.
    func prove(_ manifest: Manifest, name: String = "the new backup") throws {
        guard case .incremental(let state, _, _) = decision else { return }
        guard let baseManifest else {
            throw StoreBackupError.unexpected(reason: "an incremental was built without its base's manifest")
        }
        do {
            try ChainLinkRule.check(
                manifest, named: name, hasPageDelta: { [patchedPaths] in patchedPaths.contains($0) }, base: state.backupName,
                baseManifest: baseManifest,
                baseManifestSHA256: state.manifestSHA256)
        } catch {
            throw StoreBackupError.unexpected(reason: "refusing to publish an incremental that would not restore: \(error)")
        }
    }

    /// Removes the scratch files this build made (the page maps not yet saved, the deltas).
    func discard() {
        for path in scratch { unlink(path) }
        scratch = []
    }
}

extension ArchiveChainParts {
    /// A store path's entry name as raw bytes (without the NUL libzip wants).
    static func entryName(for path: String) -> [UInt8] {
        ArchiveNames.entryName(for: path).dropLast().map { UInt8(bitPattern: $0) }
    }
}
