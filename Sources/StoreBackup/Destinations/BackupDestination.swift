import Foundation

/// A backup as a destination lists it.
public struct BackupListing: Sendable, Equatable, Codable {
    /// The backup's name, e.g. `2026-11-22 031507 Stores.zip`.
    public var name: String
    /// Its size in bytes.
    public var size: Int64
    /// The date in the name, or the file's modification time when the name has none.
    public var date: Date
    /// When the destination says the object was last written, when it says.
    public var modified: Date?

    /// Whether the name carries a date storebackup can read. Only such backups can be
    /// `latest`; others (renamed or made by hand) are listed and restorable by exact name.
    public var hasDateInName: Bool { BackupName.date(of: name) != nil }

    /// A listing entry; destinations make these.
    public init(name: String, size: Int64, date: Date, modified: Date?) {
        self.name = name
        self.size = size
        self.date = date
        self.modified = modified
    }
}

/// Where backups are kept. Deliberately narrow (put, get, list, delete), so a new
/// service is one file; retries and similar concerns wrap a destination from outside
/// (see ``WrappingDestination``).
///
/// What a destination can do beyond the four operations is asked of it through the
/// capability methods below (``localPath(of:)``, ``prepareInPlaceArchive()``), never found
/// by casting to a concrete type: a cast fails silently once a destination is wrapped.
/// Each answers nil where the destination cannot, which is the default. Publishing
/// atomically is not a capability: every destination's ``upload(file:as:progress:)`` must.
public protocol BackupDestination: Sendable {
    /// Names the destination in messages; never contains secrets.
    var displayName: String { get }

    /// The backup `name` as a file on this machine, when the destination keeps its backups
    /// here: restore, verify and copy then read it in place instead of downloading a copy.
    /// nil when the destination is remote (the default) or has no such backup.
    func localPath(of name: String) -> String?

    /// Makes the destination ready to receive an archive built inside it, so that publishing
    /// is a rename rather than a copy, and returns a fresh temporary path there to build it
    /// at (the local folder: creates the folder and removes dead runs' temporaries).
    /// nil when the destination cannot (the default): the archive is built in `TMPDIR`.
    /// Throws when the destination should take the archive but cannot (a folder that cannot
    /// be created).
    func prepareInPlaceArchive() throws -> String?

    /// Reads byte ranges of the backup `name` of `size` bytes (from its listing) without
    /// downloading it (see ``BackupRangeReader``); nil when the destination cannot (the default).
    func rangeReader(of name: String, size: Int64) -> BackupRangeReader?

    /// Every object whose name ends in " Stores.zip", in no particular order.
    func listBackups() async throws -> [BackupListing]

    /// Publishes the local file `file` under `name` atomically: the name never shows a
    /// partial file, and an existing backup is never overwritten (`backupExists`).
    /// The local file may be moved away by this call.
    func upload(file: String, as name: String, progress: ProgressHandler?) async throws

    /// Publishes a point (an incremental) named from the chain state rather than from a
    /// listing: first checks, in one request, that `base` (the chain's newest backup, which
    /// the point applies to) is still there with the size it was published with, then
    /// publishes as ``upload(file:as:progress:)`` does. A destination may skip its own check
    /// that `name` is free where the server refuses to overwrite by itself (S3's
    /// `If-None-Match`). Throws `chainBaseChanged` when the base is gone or changed: nothing
    /// was published. The default lists the destination, then uploads.
    func publishPoint(file: String, as name: String, onto base: BackupListing, progress: ProgressHandler?) async throws

    /// Whether an upload that returned was checked by the server against the bytes sent
    /// (S3's `Content-MD5` and MD5 ETag), so reading the copy back proves nothing more.
    /// False by default.
    var checksUploadedBytes: Bool { get }

    /// Downloads `name` into the local path `file` (which does not exist yet).
    func download(_ name: String, to file: String, progress: ProgressHandler?) async throws

    /// Removes `name`; throws `backupNotFound` when there is no such backup.
    func delete(_ name: String) async throws

    /// Removes several backups in as few requests as the service allows (S3's DeleteObjects),
    /// for retention. Returns the names it could not remove, each with the server's answer (a
    /// name already gone counts as removed); nil, having removed nothing, where it cannot
    /// (the default, and a versioned or locked S3 bucket): the caller deletes one by one.
    func deleteBatch(_ names: [String]) async throws -> [String: String]?

    /// Checks, in a request or two, that the destination can take a backup (reachable,
    /// credentials accepted, folder there or creatable), so `create` fails in seconds
    /// instead of after archiving. The default does nothing.
    func preflight() async throws

    /// Leftovers of uploads that never finished (incomplete S3 multipart uploads,
    /// temporaries on WebDAV/SFTP) older than `age` seconds. The default: none.
    func staleUploads(olderThan age: Double) async throws -> [StaleUpload]

    /// Removes leftovers found by ``staleUploads(olderThan:)``. The default does nothing.
    func removeStaleUpload(_ upload: StaleUpload) async throws

    /// The S3 Object Lock retention on backup `name` (mode and retain-until date); nil when
    /// it has none, or the destination cannot lock (the default).
    func retention(of name: String) async throws -> BackupRetention?

    /// Locks backup `name` until at least `retention.until`, so a base stays as long as
    /// its dependents (see ``extendChainRetention(of:)``). A lock that already lasts as long
    /// is left alone, and an existing lock keeps its mode (extending a date is allowed in
    /// both modes; changing the mode is not). Returns whether it changed the lock.
    /// The default, for destinations that cannot lock, throws.
    func extendRetention(of name: String, to retention: BackupRetention) async throws -> Bool
}

/// An upload that never finished and still takes space on the destination.
public struct StaleUpload: Sendable, Equatable, Codable {
    /// What the destination calls it (an object key or a file name).
    public var name: String
    /// When it was started or last written, when the destination says.
    public var started: Date?
    /// An identifier the destination needs to remove it (an S3 upload id), or nil.
    public var identifier: String?

    /// A leftover; destinations make these.
    public init(name: String, started: Date?, identifier: String? = nil) {
        self.name = name
        self.started = started
        self.identifier = identifier
    }
}

extension BackupDestination {
    /// Remote by default: no backup is a file on this machine.
    public func localPath(of name: String) -> String? { nil }
    /// Built in `TMPDIR` by default.
    public func prepareInPlaceArchive() throws -> String? { nil }
    /// Nothing to check by default.
    public func preflight() async throws {}
    /// No leftovers by default.
    public func staleUploads(olderThan age: Double) async throws -> [StaleUpload] { [] }
    /// Nothing to remove by default.
    public func removeStaleUpload(_ upload: StaleUpload) async throws {}
    /// One by one by default.
    public func deleteBatch(_ names: [String]) async throws -> [String: String]? { nil }
    /// No locks by default.
    public func retention(of name: String) async throws -> BackupRetention? { nil }
    /// Cannot lock by default.
    public func extendRetention(of name: String, to retention: BackupRetention) async throws -> Bool {
        throw StoreBackupError.destination(destination: displayName, reason: "cannot lock backups (S3 Object Lock needs S3)")
    }
    /// Lists the destination to find the base, then uploads.
    public func publishPoint(file: String, as name: String, onto base: BackupListing, progress: ProgressHandler?) async throws {
        try PointBase.require(base, found: try await listBackups().first { $0.name == base.name }, at: displayName)
        try await upload(file: file, as: name, progress: progress)
    }
    /// Uploads are read back to be checked, by default.
    public var checksUploadedBytes: Bool { false }
}

/// The check a point's publishing makes of its base (``BackupDestination/publishPoint(file:as:onto:progress:)``).
enum PointBase {
    /// Throws unless `found` (what the destination holds under the base's name, nil when
    /// nothing) is the base as it was published: another host may have deleted or replaced it
    /// since this host listed the chain, and a point on it would not restore.
    static func require(_ base: BackupListing, found: BackupListing?, at destination: String) throws {
        guard let found else {
            throw StoreBackupError.chainBaseChanged(base: base.name, destination: destination, problem: "is no longer there")
        }
        guard found.size == base.size else {
            throw StoreBackupError.chainBaseChanged(
                base: base.name, destination: destination,
                problem: "holds \(found.size) bytes, not the \(base.size) it was published with")
        }
    }
}

extension BackupDestination {
    /// Backups newest first (by the date in the name, then by name, every incremental before
    /// its bases: ``BackupChains/newestFirst(_:)``); backups whose name carries no date come
    /// last, whatever their upload time, since that time is not theirs.
    public func sortedBackups() async throws -> [BackupListing] {
        BackupChains.newestFirst(try await listBackups())
    }

    /// Removes every leftover upload older than `age` seconds (a day for `prune`) and
    /// returns those it removed. One that cannot be removed is left for next time.
    public func removeStaleUploads(olderThan age: Double) async throws -> [StaleUpload] {
        var removed: [StaleUpload] = []
        for upload in try await staleUploads(olderThan: age) {
            if (try? await removeStaleUpload(upload)) != nil { removed.append(upload) }
        }
        return removed
    }

    /// Resolves "latest" or a name to an existing backup.
    public func resolve(_ nameOrLatest: String) async throws -> BackupListing {
        let backups = try await sortedBackups()
        if nameOrLatest == "latest" {
            // A name without a date says nothing about when the backup was made (anyone who
            // can write to the destination can upload one): never pick it as the newest.
            guard let newest = backups.first(where: \.hasDateInName) else { throw StoreBackupError.noBackups(destination: displayName) }
            return newest
        }
        try BackupName.validate(nameOrLatest)
        guard let match = backups.first(where: { $0.name == nameOrLatest }) else {
            throw StoreBackupError.backupNotFound(name: nameOrLatest, destination: displayName)
        }
        return match
    }
}
