import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Compaction of a chain's points into levels (docs/levels.md): once the hour of the chain's
/// newest point has ended, that hour's points are merged into one point on the previous
/// hour's head (the hourly); once its day has ended, the day's hourlies are merged into one
/// on the previous day's head or the full (the daily). The merged point holds the same store
/// as the newest point it merges, is proven against its parts and its base before it is
/// published, and becomes the chain state's newest backup, so the next point applies onto it.
/// Nothing is deleted here: the merged parts are minute (or hourly) points that retention
/// removes when their level's span ends, and nothing kept depends on them.
struct PointCompaction: Sendable {
    let storesDirectory: String
    let destination: any BackupDestination
    let password: BackupPassword?
    let compressionLevel: Int
    let logger: Logger
    let now: Date
    /// The `store` dimension of the metrics.
    var metricsStore: String
    /// The levels' spans, for S3 Object Lock (``LevelLocks``).
    var levels: PointLevelPolicy = PointLevelPolicy()

    /// The span whose points are merged into one.
    enum Span: String, Sendable {
        case hour = "hourly"
        case day = "daily"

        /// The level of the point an ended span leaves as its head.
        var level: PointLevel { self == .hour ? .hourly : .daily }

        func bucket(of date: Date) -> Int {
            self == .hour ? PointLevels.hour(of: date) : PointLevels.day(of: date)
        }
    }

    /// One merge made.
    struct Merged: Sendable {
        var name: String
        var level: String
        var parts: [String]
        var size: Int64
        var downloadedBytes: Int64
        var manifest: Manifest
    }

    /// What to merge: `parts` (links of the chain, oldest first, all of the newest link's
    /// span) onto `base` (the link before them); nil when the newest link's span has not ended
    /// or it already applies onto the previous head (one point in its span).
    static func plan(_ span: Span, links: [String], now: Date) -> (base: String, parts: [String])? {
        guard let newest = links.last, BackupName.isIncremental(newest), let newestDate = BackupName.date(of: newest),
            span.bucket(of: newestDate) < span.bucket(of: now)
        else { return nil }
        var first = links.count - 1
        while first > 0, BackupName.isIncremental(links[first - 1]),
            let date = BackupName.date(of: links[first - 1]), span.bucket(of: date) == span.bucket(of: newestDate)
        {
            first -= 1
        }
        guard first > 0, links.count - first >= 2 else { return nil }
        return (links[first - 1], Array(links[first...]))
    }

    /// The newest link when its span has ended and it is the span's only point on the
    /// previous head: the span's head without a merge (a point whose lock must then grow).
    static func promoted(_ span: Span, links: [String], now: Date) -> String? {
        guard links.count >= 2, let newest = links.last, BackupName.isIncremental(newest), let date = BackupName.date(of: newest),
            span.bucket(of: date) < span.bucket(of: now), let previous = BackupName.date(of: links[links.count - 2])
        else { return nil }
        let alone = !BackupName.isIncremental(links[links.count - 2]) || span.bucket(of: previous) != span.bucket(of: date)
        return alone ? newest : nil
    }

    /// Merges the newest point's ended hour, then its ended day. Returns the merges made.
    func run() async throws -> [Merged] {
        let folder = ChainFolder(storesDirectory: storesDirectory, destination: destination.displayName)
        var made: [Merged] = []
        var listing: [BackupListing]?
        for span in [Span.hour, .day] {
            guard let state = folder.peek(), state.spooled == nil, let links = state.links,
                links.last?.name == state.backupName, links.count == state.chainLength + 1
            else { continue }
            guard let plan = Self.plan(span, links: links.map(\.name), now: now) else {
                if let head = Self.promoted(span, links: links.map(\.name), now: now) {
                    try await lock(head, as: span.level, state: state, chain: links.map(\.name), folder: folder)
                }
                continue
            }
            if listing == nil { listing = try await destination.listBackups() }
            guard let merged = try await merge(plan, span: span, state: state, links: links, folder: folder, listing: listing!)
            else { break }
            listing?.append(BackupListing(name: merged.name, size: merged.size, date: BackupName.date(of: merged.name)!, modified: nil))
            made.append(merged)
        }
        return made
    }

    private func merge(
        _ plan: (base: String, parts: [String]), span: Span, state: ChainState, links: [PublishedLink], folder: ChainFolder,
        listing: [BackupListing]
    ) async throws -> Merged? {
        let sizes = Dictionary(listing.map { ($0.name, $0.size) }) { first, _ in first }
        // The chain must be at the destination as the state has it; else the next point finds out.
        for link in links where link.name == plan.base || plan.parts.contains(link.name) {
            guard sizes[link.name] == link.size else {
                logger.warning(
                    "not merging the \(span.rawValue) points: \(link.name) is not at the destination as published",
                    metadata: ["store": "\(storesDirectory)"])
                return nil
            }
        }
        var base = folder.manifestCopy(of: plan.base)
        if base == nil, let baseSize = sizes[plan.base] { base = try await fetchManifest(of: plan.base, size: baseSize) }
        guard let base else {
            logger.warning(
                "not merging the \(span.rawValue) points: the manifest of \(plan.base) cannot be read",
                metadata: ["store": "\(storesDirectory)"])
            return nil
        }
        var downloaded: Int64 = 0
        var fetched: [String] = []
        defer { for path in fetched { unlink(path) } }
        var parts: [String] = []
        var mergedBytes: Int64 = 0
        for name in plan.parts {
            let copy = folder.pointCopyPath(of: name)
            if FileSystem.fileExists(copy) {
                parts.append(copy)
            } else {
                let scratch = try folder.pointScratchPath(purpose: "fetched")
                fetched.append(scratch)
                try await destination.download(name, to: scratch, progress: nil)
                downloaded += sizes[name] ?? 0
                parts.append(scratch)
            }
            mergedBytes += sizes[name] ?? 0
        }
        let output = try folder.pointScratchPath(purpose: "merged")
        defer { unlink(output) }
        let cancel = CancellationFlag()
        let partPaths = parts
        let manifest = try await runBlocking(name: "storebackup-compact") { _ in
            try PointMerge.merge(
                parts: partPaths, onto: PointMergeBase(name: plan.base, manifest: base.manifest, manifestSHA256: base.sha256),
                password: password, into: output, scratchDirectory: folder.pointsFolder, compressionLevel: compressionLevel,
                cancel: cancel)
        }
        TestPausePoint.reach("compaction-merged")
        let size = Int64(try FileSystem.lstatInfo(output).st_size)
        guard let baseListing = listing.first(where: { $0.name == plan.base }) else { return nil }
        let name = try await publish(output, onto: baseListing, newest: plan.parts.last!, listing: listing)
        TestPausePoint.reach("compaction-published")
        let manifestBytes = try manifest.encoded()
        let kept = Array(links.prefix { $0.name != plan.base }) + links.filter { $0.name == plan.base }
        let newLinks = kept + [PublishedLink(name: name, size: size)]
        try folder.recordMergedPoint(
            of: state, name: name, size: size, manifest: manifestBytes, chainLength: newLinks.count - 1, links: newLinks)
        if let merged = folder.peek() {
            try await lock(name, as: span.level, state: merged, chain: newLinks.map(\.name), folder: folder)
        }
        try? folder.keepManifestCopy(manifestBytes, of: name)
        try? folder.keepPointCopy(output, as: name)
        folder.dropPointCopies(keeping: newLinks.map(\.name))
        logger.info(
            "merged \(plan.parts.count) points into the \(span.rawValue) point \(name)",
            metadata: ["store": "\(storesDirectory)", "base": "\(plan.base)"])
        BackupMetrics.recordCompaction(
            store: metricsStore, destination: destination.displayName, level: span.rawValue, mergedBytes: mergedBytes,
            downloadedBytes: downloaded)
        return Merged(
            name: name, level: span.rawValue, parts: plan.parts, size: size, downloadedBytes: downloaded, manifest: manifest)
    }

    /// On an S3 Object Lock chain, locks the head `name` of an ended span for its level's
    /// lifetime (and its chain as long), once: the chain state records the level it was
    /// locked for. Nothing on a chain known to carry no lock.
    private func lock(_ name: String, as level: PointLevel, state: ChainState, chain: [String], folder: ChainFolder) async throws {
        guard state.pointsUnlocked != true, (state.levelLocked?[name] ?? .minute) < level, let date = BackupName.date(of: name)
        else { return }
        let locked = try await LevelLocks.extend(
            name, until: LevelLocks.until(level, at: date, levels: levels), chain: chain, at: destination)
        var updated = state
        if locked {
            // Only the chain's links are kept: the others left it.
            updated.levelLocked = (state.levelLocked ?? [:]).filter { chain.contains($0.key) }.merging([name: level]) { $1 }
        } else {
            updated.pointsUnlocked = true
        }
        try folder.writeStateFile(updated)
    }

    /// Publishes the merged point under a date of the newest part's hour that no backup at the
    /// destination carries (a later second first, else an earlier one after the other parts),
    /// so its level reads back from the names and no name means two bases.
    private func publish(_ file: String, onto base: BackupListing, newest: String, listing: [BackupListing]) async throws -> String {
        guard let newestDate = BackupName.date(of: newest) else {
            throw StoreBackupError.unexpected(reason: "\(newest) carries no date")
        }
        var taken = Set(listing.compactMap { BackupName.ownDateText(of: $0.name).map(String.init) })
        for date in Self.candidateDates(after: newestDate, listing: listing) {
            guard let name = BackupName.makeIncremental(for: date, base: base.name), !taken.contains(UTCTimestamp.compact(date))
            else { continue }
            do {
                try await destination.publishPoint(file: file, as: name, onto: base, progress: nil)
                return name
            } catch StoreBackupError.backupExists {
                taken.insert(UTCTimestamp.compact(date))
            }
        }
        throw StoreBackupError.unexpected(reason: "no free name for the merged point of \(newest)'s hour")
    }

    /// The dates a merged point may take: the seconds after the newest part to the end of its
    /// hour, then those before it down to just after the next newest backup.
    static func candidateDates(after newest: Date, listing: [BackupListing]) -> [Date] {
        let hourEnd = Double(PointLevels.hour(of: newest) + 1) * 3_600
        let later = stride(from: newest.timeIntervalSince1970 + 1, to: hourEnd, by: 1).prefix(60)
        let floor = listing.map(\.date).filter { $0 < newest }.max()?.timeIntervalSince1970 ?? 0
        let earlier = stride(from: newest.timeIntervalSince1970 - 1, to: floor, by: -1).prefix(60)
        return (Array(later) + Array(earlier)).map { Date(timeIntervalSince1970: $0) }
    }

    /// The manifest of `name` read from the destination when no local copy is kept (a local
    /// loss): in place from a local folder, else by ranged reads of its directory and manifest
    /// only. Nil where the destination serves no ranges.
    private func fetchManifest(of name: String, size: Int64) async throws -> (manifest: Manifest, sha256: String)? {
        let passwords = password.map(PasswordProvider.fixed)
        let cancel = CancellationFlag()
        let reader: ArchiveReader
        if let path = destination.localPath(of: name) {
            reader = try await runBlocking(name: "storebackup-compact") { _ in
                try ArchiveReader(path: path, backupName: name, passwords: passwords)
            }
        } else if let ranges = destination.rangeReader(of: name, size: size) {
            let archive = RangedArchive(size: ranges.size, maxFetchBytes: BackupRangeReader.maxReadBytes) { range in
                try ranges.read(range, cancel: cancel)
            }
            reader = try await runBlocking(name: "storebackup-compact") { _ in
                try ArchiveReader(ranged: archive, backupName: name, passwords: passwords)
            }
        } else {
            return nil
        }
        defer { reader.release() }
        guard let manifest = reader.manifest, let sha256 = reader.manifestSHA256 else { return nil }
        return (manifest, sha256)
    }
}
