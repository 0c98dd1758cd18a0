import Foundation

/// The tree an archive describes, checked as a whole before anything is written.
///
/// A link is judged the way the kernel will resolve it once everything is on disk:
/// each component of its target that is itself a link of the archive is replaced by
/// where that link leads (so `d1/l -> ..` followed by `x -> d1/l/../../etc/passwd` is
/// seen to leave the root). No entry may sit beneath a link or a file, so the folders
/// restore writes into are real folders of this archive.
struct ArchiveTree {
    /// The kind of every path of the tree: looked up in the manifest's rows when there is
    /// one (the cross-check made them the entries' kinds), so that no table of every path
    /// is built beside them.
    enum Kinds {
        case table([String: ArchiveEntry.Kind])
        /// Each row's kind by its type; a row whose content is elsewhere in the chain is a file.
        case manifest(ManifestLookup)

        func kind(of path: String) -> ArchiveEntry.Kind? {
            switch self {
            case .table(let kinds): return kinds[path]
            case .manifest(let rows): return rows[path].map { $0.source != nil ? .file : ArchiveEntry.Kind(manifestType: $0.type) }
            }
        }

        /// Every path, in order (byte order from the manifest, text order from a table).
        func forEachPathInOrder(_ body: (String) throws -> Void) rethrows {
            switch self {
            case .table(let kinds): for path in kinds.keys.sorted() { try body(path) }
            case .manifest(let rows): try rows.forEachPathInOrder(body)
            }
        }
    }

    private let kinds: Kinds
    private let links: [String: String]
    private let backupName: String
    /// Where each link leads, as root-relative components, and how many links resolving it
    /// followed; nil while being resolved (meeting it again is a loop) or when it escapes.
    private var resolved: [String: (parts: [String], hops: Int)?] = [:]

    init(entries: [ArchiveEntry], linkTargets: [String: String], backupName: String) {
        var kinds: [String: ArchiveEntry.Kind] = [:]
        for entry in entries { kinds[entry.path] = entry.kind }
        self.init(kinds: .table(kinds), linkTargets: linkTargets, backupName: backupName)
    }

    init(kinds: Kinds, linkTargets: [String: String], backupName: String) {
        self.kinds = kinds
        self.links = linkTargets
        self.backupName = backupName
    }

    /// The links of a store being backed up (paths and targets escaped) whose target leaves
    /// the store, is absolute, or loops: restore refuses them unless allowed, so `create`
    /// names them and records them in the manifest. Bounded work per link (hop limit).
    static func outsideLinks(_ linkTargets: [String: String]) -> [String] {
        var tree = ArchiveTree(kinds: .table([:]), linkTargets: linkTargets, backupName: "")
        return linkTargets.keys.sorted().filter { path in
            var hops = 0
            return (try? tree.location(ofLink: path, hops: &hops)) == nil
        }
    }

    /// Throws `unsafeArchiveEntry` for the first entry beneath a link or file, or link
    /// whose target leaves the root (or loops) that `recordedOutside` (the manifest's outside
    /// links) does not hold: a hostile archive's. A recorded one throws `outsideLink`
    /// (which names the option) unless `allowOutside`.
    mutating func check(recordedOutside: Set<String> = [], allowOutside: Bool = false) throws {
        // The paths come in order, so a folder's entries follow one another: the folders
        // above them are looked up once, for the first (a blob store's 200,000 files in one
        // folder cost two lookups each before).
        var checkedParent: Substring?
        try kinds.forEachPathInOrder { path in
            guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return }
            let parent = path[..<slash]
            if let checkedParent, parent.utf8.elementsEqual(checkedParent.utf8) { return }
            var prefix = ""
            for part in path.split(separator: "/").dropLast() {
                prefix += prefix.isEmpty ? String(part) : "/" + part
                if let kind = kinds.kind(of: prefix), kind != .directory {
                    throw StoreBackupError.unsafeArchiveEntry(
                        name: backupName, entry: "\(path) (beneath the \(kind == .symlink ? "link" : "file") \(prefix))")
                }
            }
            checkedParent = parent
        }
        for (path, target) in links.sorted(by: { $0.key < $1.key }) {
            var hops = 0
            guard try location(ofLink: path, hops: &hops) == nil else { continue }
            guard recordedOutside.contains(path) else {
                throw StoreBackupError.unsafeArchiveEntry(name: backupName, entry: "\(path) -> \(target)")
            }
            guard !allowOutside else { continue }
            throw Self.escape(ofLink: path, in: links) == .loop
                ? StoreBackupError.linkLoop(name: backupName, link: path, target: target)
                : StoreBackupError.outsideLink(name: backupName, link: path, target: target)
        }
    }

    /// Why a link judged to escape does: its chain of targets turns absolute, climbs above
    /// the root, or never ends (a loop, or more links than the kernel follows). Only for
    /// wording: whether a link escapes is decided by ``check(recordedOutside:allowOutside:)``.
    enum Escape: Equatable { case absolute, outside, loop }

    /// Resolves `path` the way the kernel would, link by link, without the cache.
    static func escape(ofLink path: String, in links: [String: String]) -> Escape {
        guard let first = links[path] else { return .outside }
        var parts = Array(path.split(separator: "/").dropLast().map(String.init))
        var hops = 1
        guard !first.isEmpty, !first.hasPrefix("/") else { return .absolute }
        // Components still to apply, the next one last.
        var pending = Array(first.split(separator: "/", omittingEmptySubsequences: true).reversed())
        while let component = pending.popLast() {
            if component == "." { continue }
            if component == ".." {
                guard !parts.isEmpty else { return .outside }
                parts.removeLast()
                continue
            }
            parts.append(String(component))
            guard let target = links[parts.joined(separator: "/")] else { continue }
            hops += 1
            guard hops <= ArchiveLimits.maxLinkHops else { return .loop }
            guard !target.isEmpty, !target.hasPrefix("/") else { return .absolute }
            parts.removeLast()
            pending += target.split(separator: "/", omittingEmptySubsequences: true).reversed()
        }
        return .outside
    }

    /// Where the link at `path` leads, or nil when it leaves the root, loops, or needs more
    /// links than the kernel follows. `hops` counts the links followed so far.
    private mutating func location(ofLink path: String, hops: inout Int) throws -> [String]? {
        if let known = resolved[path] {
            guard let known else { return nil }
            hops += known.hops
            return hops <= ArchiveLimits.maxLinkHops ? known.parts : nil
        }
        guard let target = links[path] else { return nil }
        resolved[path] = .some(nil)  // in progress
        let parent = Array(path.split(separator: "/").dropLast().map(String.init))
        var own = 1
        let result = try walk(from: parent, target: target, hops: &own)
        resolved[path] = result.map { .some((parts: $0, hops: own)) } ?? .some(nil)
        hops += own
        return hops <= ArchiveLimits.maxLinkHops ? result : nil
    }

    /// Applies `target`'s components to `base`, following the archive's links as it goes.
    private mutating func walk(from base: [String], target: String, hops: inout Int) throws -> [String]? {
        guard !target.isEmpty, !target.hasPrefix("/") else { return nil }
        var parts = base
        for component in target.split(separator: "/", omittingEmptySubsequences: true) {
            if component == "." { continue }
            if component == ".." {
                guard !parts.isEmpty else { return nil }
                parts.removeLast()
                continue
            }
            parts.append(String(component))
            let joined = parts.joined(separator: "/")
            if links[joined] != nil {
                guard let destination = try location(ofLink: joined, hops: &hops) else { return nil }
                parts = destination
            }
        }
        return parts
    }
}
