import Foundation

/// A destination that wraps another to add a concern from outside (retries, logging,
/// fault injection in tests), in the spirit of restic's backend `Unwrapper`.
///
/// Every requirement of ``BackupDestination`` is forwarded to ``base`` by default, so a
/// wrapper overrides only what it changes and can never hide a capability of the
/// destination inside it (a local folder stays readable in place when wrapped).
public protocol WrappingDestination: BackupDestination {
    /// The destination inside this wrapper.
    var base: any BackupDestination { get }
}

extension WrappingDestination {
    /// The wrapped destination's name: a wrapper is not a place of its own.
    public var displayName: String { base.displayName }
    /// Forwarded to ``base``.
    public func localPath(of name: String) -> String? { base.localPath(of: name) }
    /// Forwarded to ``base``.
    public func prepareInPlaceArchive() throws -> String? { try base.prepareInPlaceArchive() }
    /// Forwarded to ``base``.
    public func listBackups() async throws -> [BackupListing] { try await base.listBackups() }
    /// Forwarded to ``base``.
    public func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try await base.upload(file: file, as: name, progress: progress)
    }
    /// Forwarded to ``base``.
    public func publishPoint(file: String, as name: String, onto base: BackupListing, progress: ProgressHandler?) async throws {
        try await self.base.publishPoint(file: file, as: name, onto: base, progress: progress)
    }
    /// Forwarded to ``base``.
    public var checksUploadedBytes: Bool { base.checksUploadedBytes }
    /// Forwarded to ``base``.
    public func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        try await base.download(name, to: file, progress: progress)
    }
    /// Forwarded to ``base``.
    public func delete(_ name: String) async throws { try await base.delete(name) }
    /// Forwarded to ``base``.
    public func deleteBatch(_ names: [String]) async throws -> [String: String]? { try await base.deleteBatch(names) }
    /// Forwarded to ``base``.
    public func preflight() async throws { try await base.preflight() }
    /// Forwarded to ``base``.
    public func staleUploads(olderThan age: Double) async throws -> [StaleUpload] {
        try await base.staleUploads(olderThan: age)
    }
    /// Forwarded to ``base``.
    public func removeStaleUpload(_ upload: StaleUpload) async throws { try await base.removeStaleUpload(upload) }
    /// Forwarded to ``base``.
    public func retention(of name: String) async throws -> BackupRetention? { try await base.retention(of: name) }
    /// Forwarded to ``base``.
    public func extendRetention(of name: String, to retention: BackupRetention) async throws -> Bool {
        try await base.extendRetention(of: name, to: retention)
    }
}
