import Foundation

/// The chains of the backups at one destination, read from their names alone (see
/// `BackupName`): which backup each incremental applies to (its base), which backups
/// depend on one, and which incrementals cannot be restored because a base is missing.
///
/// A base is the backup whose own date is the date an incremental's name gives after
/// "incremental on". storebackup names an incremental after its base, but earlier versions
/// could name one before it (a clock stepped back, a burst of backups): such a name is still
/// read as pointing at its base, and backups are ordered so that every incremental comes
/// after its bases whatever the dates say (``newestFirst(_:)``), so deleting newest first
/// never leaves an incremental without its base, and `latest` is never a base of another.
/// When several backups share that date (two stores sharing a destination in the same
/// second), each of them counts as a possible base, so keeping, copying and locking err on
/// the side of keeping too much. A link that would close a loop is not a link.
public struct BackupChains: Sendable {
    /// The backups, newest first (see ``newestFirst(_:)``).
    public let backups: [BackupListing]
    private let basesByName: [String: [String]]
    private let dependentsByBase: [String: [String]]

    /// The chains among `backups` (one destination's listing, in any order).
    public init(_ backups: [BackupListing]) {
        let links = Self.links(backups)
        let sorted = Self.newestFirst(backups, links: links)
        self.backups = sorted
        self.basesByName = links
        var dependents: [String: [String]] = [:]
        for backup in sorted {
            for base in links[backup.name] ?? [] { dependents[base, default: []].append(backup.name) }
        }
        self.dependentsByBase = dependents
    }

    /// Each incremental's bases: the backups whose own date its name gives after
    /// "incremental on". A link to a base not older than the incremental (a name from a clock
    /// stepped back) is kept unless it closes a loop; links to older bases never can.
    private static func links(_ backups: [BackupListing]) -> [String: [String]] {
        var byOwnDate: [Substring: [String]] = [:]
        for backup in backups {
            if let own = BackupName.ownDateText(of: backup.name) { byOwnDate[own, default: []].append(backup.name) }
        }
        var links: [String: [String]] = [:]
        var odd: [(name: String, base: String)] = []
        for backup in backups {
            guard let baseDate = BackupName.baseDateText(of: backup.name), let own = BackupName.ownDateText(of: backup.name) else {
                continue
            }
            for base in byOwnDate[baseDate] ?? [] where base != backup.name {
                if baseDate < own { links[backup.name, default: []].append(base) } else { odd.append((backup.name, base)) }
            }
        }
        func reaches(_ from: String, _ target: String) -> Bool {
            var seen: Set<String> = []
            var pending = [from]
            while let next = pending.popLast() {
                if next == target { return true }
                guard seen.insert(next).inserted else { continue }
                pending += links[next] ?? []
            }
            return false
        }
        for link in odd.sorted(by: { ($0.name, $0.base) < ($1.name, $1.base) }) where !reaches(link.base, link.name) {
            links[link.name, default: []].append(link.base)
        }
        return links
    }

    /// `backups` newest first: by the date in the name, then by name, except that an
    /// incremental always comes before (is newer than) each of its bases; backups whose
    /// name carries no date come last, whatever their upload time, since that time is not theirs.
    public static func newestFirst(_ backups: [BackupListing]) -> [BackupListing] {
        newestFirst(backups, links: links(backups))
    }

    private static func newestFirst(_ backups: [BackupListing], links: [String: [String]]) -> [BackupListing] {
        let dates = Dictionary(backups.map { ($0.name, $0.date) }) { first, _ in first }
        // An incremental's place: just after the latest of its bases, when its own date is
        // not later. `links` has no loops.
        var placed: [String: (date: Date, depth: Int)] = [:]
        func place(_ name: String) -> (date: Date, depth: Int) {
            if let known = placed[name] { return known }
            var result = (date: dates[name] ?? .distantPast, depth: 0)
            for base in links[name] ?? [] {
                let under = place(base)
                if (under.date, under.depth) >= (result.date, result.depth) { result = (under.date, under.depth + 1) }
            }
            placed[name] = result
            return result
        }
        for backup in backups where backup.hasDateInName { _ = place(backup.name) }
        return backups.sorted { left, right in
            if left.hasDateInName != right.hasDateInName { return left.hasDateInName }
            let l = placed[left.name] ?? (left.date, 0)
            let r = placed[right.name] ?? (right.date, 0)
            return (l.date, l.depth, left.date, left.name) > (r.date, r.depth, right.date, right.name)
        }
    }

    /// The chains among backups known by name only.
    public init(names: [String]) {
        self.init(names.map { BackupListing(name: $0, size: 0, date: BackupName.date(of: $0) ?? .distantPast, modified: nil) })
    }

    /// Whether `name` is an incremental backup's name (it names a base).
    public func isIncremental(_ name: String) -> Bool { BackupName.isIncremental(name) }

    /// The backups `name` applies to directly: its base (more than one only when several
    /// share the base's date); empty for a full, and for an incremental whose base is missing.
    public func bases(of name: String) -> [String] { basesByName[name] ?? [] }

    /// The base of incremental `name`; nil for a full, or when the base is not listed.
    public func base(of name: String) -> String? { bases(of: name).first }

    /// Every backup `name` needs to be restored, oldest first (the full first), without
    /// `name` itself; empty for a full. A broken chain gives what is there.
    public func ancestors(of name: String) -> [String] {
        var found: Set<String> = []
        var pending = bases(of: name)
        while let next = pending.popLast() {
            guard found.insert(next).inserted else { continue }
            pending += bases(of: next)
        }
        return oldestFirst(found)
    }

    /// The chain of `name` down to its full, oldest first and ending with `name`.
    public func chain(of name: String) -> [String] { ancestors(of: name) + [name] }

    /// The backups that apply to `name` directly.
    public func directDependents(of name: String) -> [String] { dependentsByBase[name] ?? [] }

    /// Every backup that needs `name` (its incrementals, theirs, and so on), newest first:
    /// the order they can be deleted in.
    public func dependents(of name: String) -> [String] {
        var found: Set<String> = []
        var pending = directDependents(of: name)
        while let next = pending.popLast() {
            guard found.insert(next).inserted else { continue }
            pending += directDependents(of: next)
        }
        return oldestFirst(found).reversed()
    }

    /// For an incremental whose chain is broken, the date (`yyyy-MM-dd HHmmss`) of the
    /// first base that is not listed, walking from `name` down; nil when the chain is whole
    /// (and for a full).
    public func missingBase(of name: String) -> String? {
        var visited: Set<String> = []
        var pending = [name]
        while let next = pending.popLast() {
            guard visited.insert(next).inserted, let baseDate = BackupName.baseDateText(of: next) else { continue }
            let bases = bases(of: next)
            if bases.isEmpty { return String(baseDate) }
            pending += bases
        }
        return nil
    }

    /// Whether `name` cannot be restored from this destination because its chain lacks a base.
    public func isBroken(_ name: String) -> Bool { missingBase(of: name) != nil }

    private func oldestFirst(_ names: Set<String>) -> [String] {
        backups.map(\.name).filter { names.contains($0) }.reversed()
    }
}
