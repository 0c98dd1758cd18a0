import Foundation
import Logging

/// Wraps any destination and gives each of its operations (list, upload, download,
/// delete) one retry budget by time (``RetryPolicy/budget``). Requests retry inside it
/// (`RetryingTransport`: a resumed download, one failed S3 part); what a request cannot
/// heal on its own (bytes that arrived damaged, a busy service that outlasted a request's
/// tries) redoes the operation, from the same budget. So however the retries fall, an
/// operation gives up about `budget` seconds after it started, plus its last try.
/// Capabilities (``BackupDestination/localPath(of:)`` and the like) pass straight through.
public struct RetryingDestination: WrappingDestination {
    /// The destination whose calls are retried.
    public let base: any BackupDestination
    /// How patiently.
    public let policy: RetryPolicy
    /// Where each retry of a whole operation is noted (info level); silent by default.
    public let logger: Logger

    /// Wraps `base` so each of its operations is retried by `policy`.
    public init(_ base: any BackupDestination, policy: RetryPolicy = RetryPolicy(), logger: Logger = .disabled) {
        self.base = base
        self.policy = policy
        self.logger = logger
    }

    /// The base's listing, retried within the budget.
    public func listBackups() async throws -> [BackupListing] {
        try await retrying { try await base.listBackups() }
    }

    /// Publishes through the base; a failure a request could not heal redoes the whole upload,
    /// within the budget.
    public func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try await retrying { try await base.upload(file: file, as: name, progress: progress) }
    }

    /// Publishes a point through the base (its base checked each time), within the budget.
    public func publishPoint(file: String, as name: String, onto base: BackupListing, progress: ProgressHandler?) async throws {
        try await retrying { try await self.base.publishPoint(file: file, as: name, onto: base, progress: progress) }
    }

    /// A partly downloaded file is kept between attempts: backends resume from its size.
    public func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        try await retrying { try await base.download(name, to: file, progress: progress) }
    }

    /// Deletes at the base, retried within the budget.
    public func delete(_ name: String) async throws {
        try await retrying { try await base.delete(name) }
    }

    /// Deletes at the base in batches, retried within the budget (a name already gone is no failure).
    public func deleteBatch(_ names: [String]) async throws -> [String: String]? {
        try await retrying { try await base.deleteBatch(names) }
    }

    /// The base's preflight check, retried within the budget.
    public func preflight() async throws {
        try await retrying { try await base.preflight() }
    }

    /// Lists the base's leftover uploads, retried within the budget.
    public func staleUploads(olderThan age: Double) async throws -> [StaleUpload] {
        try await retrying { try await base.staleUploads(olderThan: age) }
    }

    /// Removes a leftover upload at the base, retried within the budget.
    public func removeStaleUpload(_ upload: StaleUpload) async throws {
        try await retrying { try await base.removeStaleUpload(upload) }
    }

    private func retrying<T: Sendable>(_ operation: () async throws -> T) async throws -> T {
        // A budget already open (a wrapper around a wrapper) is shared, not renewed.
        let budget = RetryBudget.current ?? RetryBudget(policy: policy)
        return try await RetryBudget.withCurrent(budget) {
            var attempt = 1
            while true {
                do {
                    return try await operation()
                } catch StoreBackupError.transfer(let failure) where failure.isRetryable {
                    let delay = try Self.nextTry(after: failure, attempt: attempt, budget: budget, logger: logger, what: displayName)
                    do { try await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000)) } catch { throw StoreBackupError.cancelled }
                    attempt += 1
                }
            }
        }
    }

    /// The wait before trying an operation again after `failure` (``RetryBudget/delayBeforeRetrying(_:attempt:)``),
    /// logged; throws the failure, saying why it was given up, when there is no next try.
    static func nextTry(
        after failure: TransferFailure, attempt: Int, budget: RetryBudget, logger: Logger, what: String
    ) throws -> Double {
        guard let delay = budget.delayBeforeRetrying(failure, attempt: attempt) else {
            throw StoreBackupError.transfer(givenUp(failure, budget: budget))
        }
        logger.info(
            "retrying an operation", metadata: ["destination": "\(what)", "attempt": "\(attempt + 1)", "error": "\(failure.message)"])
        return delay
    }

    /// The failure, saying that the budget ran out when it did (and how to give more).
    static func givenUp(_ failure: TransferFailure, budget: RetryBudget) -> TransferFailure {
        guard budget.isSpent, budget.policy.budget > 0 else { return failure }
        var described = failure
        described.message +=
            " (still failing after \(budget.retriesSpent) retries over \(DurationText.format(budget.policy.budget)); "
            + "--retry-for or retry-for: allows longer)"
        return described
    }
}
