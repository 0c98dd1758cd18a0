import Foundation

/// The chains of the backups at one destination, read from their names alone (see
/// `BackupName`): which backup each incremental applies to (its base), which backups
/// depend on one, and which incrementals cannot be restored because a base is missing.
///
/// A base is the backup whose own date is the date an incremental's name gives after
/// "incremental on". Only an older backup can be a base, so chains never loop, and every
/// dependent is newer than its base: deleting newest first never leaves an incremental
/// without its base. When several backups share that date (two stores sharing a
/// destination in the same second), each of them counts as a possible base, so keeping,
/// copying and locking err on the side of keeping too much.
public struct BackupChains: Sendable {
    /// The backups, newest first (by the date in the name, then by name).
    public let backups: [BackupListing]
    private let byOwnDate: [Substring: [String]]
    private let dependentsByBase: [String: [String]]

    /// The chains among `backups` (one destination's listing, in any order).
    public init(_ backups: [BackupListing]) {
        let sorted = backups.sorted { ($0.date, $0.name) > ($1.date, $1.name) }
        self.backups = sorted
        var byOwnDate: [Substring: [String]] = [:]
        for backup in sorted {
            if let own = BackupName.ownDateText(of: backup.name) { byOwnDate[own, default: []].append(backup.name) }
        }
        self.byOwnDate = byOwnDate
        var dependents: [String: [String]] = [:]
        for backup in sorted {
            for base in Self.bases(of: backup.name, byOwnDate: byOwnDate) { dependents[base, default: []].append(backup.name) }
        }
        self.dependentsByBase = dependents
    }

    /// The chains among backups known by name only.
    public init(names: [String]) {
        self.init(names.map { BackupListing(name: $0, size: 0, date: BackupName.date(of: $0) ?? .distantPast, modified: nil) })
    }

    private static func bases(of name: String, byOwnDate: [Substring: [String]]) -> [String] {
        guard let baseDate = BackupName.baseDateText(of: name), let own = BackupName.ownDateText(of: name), baseDate < own else {
            return []
        }
        return byOwnDate[baseDate] ?? []
    }

    /// Whether `name` is an incremental backup's name (it names a base).
    public func isIncremental(_ name: String) -> Bool { BackupName.isIncremental(name) }

    /// The backups `name` applies to directly: its base (more than one only when several
    /// share the base's date); empty for a full, and for an incremental whose base is missing.
    public func bases(of name: String) -> [String] { Self.bases(of: name, byOwnDate: byOwnDate) }

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
