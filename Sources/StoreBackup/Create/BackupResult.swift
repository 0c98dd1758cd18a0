import Foundation

/// A finished backup, as create published it at one destination.
public struct BackupResult: Sendable {
    /// The name it was published under, e.g. `2026-11-22 031507 Stores.zip`.
    public var name: String
    /// The archive's size in bytes.
    public var size: Int64
    /// The destination's ``BackupDestination/displayName``.
    public var destination: String
    /// What the archive holds: every file with its checksum, and each database's snapshot
    /// details (the format's own types, kept inside the library).
    var manifest: Manifest
    /// Seconds spent on the snapshot and the archive (scan to the closed zip).
    public var archiveSeconds: Double = 0
    /// Seconds spent publishing the archive at the destination (upload, or rename for a local folder).
    public var uploadSeconds: Double = 0

    /// How many files, folders and links the backup holds.
    public var fileCount: Int { manifest.files.count }
    /// The databases the backup holds, by their path inside the stores directory.
    public var databases: [String] { manifest.databases.map(\.path) }
    /// "full" or "incremental" (format 3; every earlier backup is a full one).
    public var kind: String { manifest.kind ?? "full" }
    /// An incremental backup's base (the backup it applies onto); nil for a full one.
    public var base: String? { manifest.base?.name }

    /// Links that point outside the stores directory (escaped paths): the backup holds
    /// them, and restore makes them only with ``ExtractionOptions/allowOutsideLinks``.
    public var outsideLinks: [String] { manifest.outsideLinks ?? [] }
    /// Sockets and device files left out of the backup, each as "path (what it is)".
    public var leftOut: [String] { manifest.leftOut ?? [] }
    /// Why this backup is a full one although an incremental was asked for
    /// (``CreateOptions/incremental``): no usable chain state, a chain that is broken at the
    /// destination, the policy. Nil otherwise.
    public var fullReason: String? = nil
    /// Set when the backup's name could not follow the destination's newest (see ``warnings``).
    var nameWarning: String? = nil
    /// Hex SHA-256 of the archive as it was sent (incrementals): what the check after a
    /// point compares the destination's copy with.
    var sentSHA256: String? = nil
    /// For a point: whether the destination said it carries no lock (nil: not asked).
    var chainUnlocked: Bool? = nil
    /// One line per thing `create` warned about (the same lines went to the logger).
    public var warnings: [String] {
        var targets: [String: String] = [:]
        for file in manifest.files { if let target = file.linkTarget { targets[file.path] = target } }
        return BackupWarnings.lines(outsideLinks: outsideLinks, leftOut: leftOut, targets: targets) + (nameWarning.map { [$0] } ?? [])
    }
}

/// How publishing one backup went at one of several destinations.
public struct PublishOutcome: Sendable {
    /// The destination's ``BackupDestination/displayName``.
    public var destination: String
    /// The backup as published there; nil when it failed there.
    public var backup: BackupResult?
    /// Why it failed there; nil when it succeeded.
    public var error: StoreBackupError?
    /// A scheduled point that was not published because the store is exactly as this backup
    /// (the chain's newest) holds it, but for times SQLite and folders move on their own.
    public var unchangedSince: String?
    /// A scheduled point that could not reach its destination and waits in the spool under
    /// this name, to go out when the destination answers again (``error`` says why not now).
    public var spooled: String?

    /// True when the backup was published at this destination, or needed not be.
    public var succeeded: Bool { backup != nil || unchangedSince != nil }
}

/// The warnings of a backup that is good but not restored exactly by default.
enum BackupWarnings {
    static func lines(outsideLinks: [String], leftOut: [String], targets: [String: String] = [:]) -> [String] {
        outsideLinks.map { link in
            let target = targets[link].map { " -> \($0)" } ?? ""
            let loops = !targets.isEmpty && ArchiveTree.escape(ofLink: link, in: targets) == .loop
            let what = loops ? "loops (it leads back through itself)" : "points outside the stores directory"
            return
                "the link \(link)\(target) \(what): it is in the backup, but restore makes it only when allowed to (--allow-outside-links)"
        } + leftOut.map { "\($0) is not in the backup: sockets and device files cannot be backed up" }
    }
}
