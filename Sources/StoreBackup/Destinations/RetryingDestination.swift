import Foundation
import Logging

/// Wraps any destination and retries whole operations (list, upload, download, delete)
/// when they fail in a way that may heal, after each request already had its own retries.
/// Backends stay free of retry logic; this and `RetryingTransport` are the only places.
/// Capabilities (``BackupDestination/localPath(of:)`` and the like) pass straight through.
public struct RetryingDestination: WrappingDestination {
    /// The destination whose calls are retried.
    public let base: any BackupDestination
    /// How often and how patiently.
    public let policy: RetryPolicy
    /// Where each retry of a whole operation is noted (info level); silent by default.
    public let logger: Logger

    /// Wraps `base` so each of its operations is retried by `policy`.
    public init(_ base: any BackupDestination, policy: RetryPolicy = RetryPolicy(), logger: Logger = .disabled) {
        self.base = base
        self.policy = policy
        self.logger = logger
    }

    public func listBackups() async throws -> [BackupListing] {
        try await retrying { try await base.listBackups() }
    }

    public func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try await retrying { try await base.upload(file: file, as: name, progress: progress) }
    }

    /// A partly downloaded file is kept between attempts: backends resume from its size.
    public func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        try await retrying { try await base.download(name, to: file, progress: progress) }
    }

    public func delete(_ name: String) async throws {
        try await retrying { try await base.delete(name) }
    }

    public func preflight() async throws {
        try await retrying { try await base.preflight() }
    }

    public func staleUploads(olderThan age: Double) async throws -> [StaleUpload] {
        try await retrying { try await base.staleUploads(olderThan: age) }
    }

    public func removeStaleUpload(_ upload: StaleUpload) async throws {
        try await retrying { try await base.removeStaleUpload(upload) }
    }

    private func retrying<T: Sendable>(_ operation: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await operation()
            } catch StoreBackupError.transfer(let failure) where failure.isRetryable && attempt < policy.operationAttempts {
                let delay = policy.delay(afterAttempt: attempt, retryAfter: failure.retryAfter)
                logger.info("retrying an operation", metadata: ["destination": "\(displayName)", "attempt": "\(attempt + 1)",
                                                                "error": "\(failure.message)"])
                do { try await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000)) } catch { throw StoreBackupError.cancelled }
                attempt += 1
            }
        }
    }
}
