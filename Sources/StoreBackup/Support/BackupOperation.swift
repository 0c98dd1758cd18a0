import Foundation

/// A running create, restore or verify whose progress is read as an `AsyncSequence`.
///
/// The closure-based API (`progress:` parameters taking a ``ProgressHandler``) suits code
/// that only logs; an operation suits code that wants to `for await` its progress, for
/// example to stream it to an admin page:
///
/// ```swift
/// let operation = BackupOperation { progress in
///     try await helper.createBackup(progress: progress)
/// }
/// for await update in operation.progress {
///     print(update.phase, update.bytesDone, "/", update.bytesTotal, update.currentFile ?? "")
/// }
/// let result = try await operation.value
/// ```
///
/// ``progress`` ends when the work ends, however it ends. Cancel with ``cancel()``: a
/// cancelled create leaves no partial backup and no temporary files
/// and throws ``StoreBackupError/cancelled``; a restore cancelled before its swap does the
/// same and leaves the live store as it was (once the swap has begun it runs to its end,
/// commit or rollback, so the store is never left half-swapped).
public struct BackupOperation<Success: Sendable>: Sendable {
    /// The progress updates, newest kept when the reader falls behind; finishes with the work.
    public let progress: AsyncStream<BackupProgress>
    /// The task doing the work. Cancelling it cancels the operation.
    let task: Task<Success, any Error>

    /// Starts `work` at once in a new task, handing it a ``ProgressHandler`` that feeds ``progress``.
    ///
    /// - Parameters:
    ///   - bufferingNewest: How many unread updates to keep; older ones are dropped when the
    ///     reader is slower than the work (updates are snapshots, so the latest matter most).
    ///   - work: The operation, e.g. `{ try await helper.createBackup(progress: $0) }`.
    public init(
        bufferingNewest: Int = 64,
        _ work: @escaping @Sendable (_ progress: @escaping ProgressHandler) async throws -> Success
    ) {
        let (stream, continuation) = AsyncStream.makeStream(
            of: BackupProgress.self, bufferingPolicy: .bufferingNewest(max(1, bufferingNewest)))
        progress = stream
        task = Task {
            defer { continuation.finish() }
            return try await work { update in continuation.yield(update) }
        }
    }

    /// Waits for the work and returns its result, or throws its error.
    public var value: Success {
        get async throws(StoreBackupError) {
            do { return try await task.value } catch { throw StoreBackupError.wrapping(error) }
        }
    }

    /// Cancels the work; ``value`` then throws ``StoreBackupError/cancelled`` unless the work
    /// had already passed the point of no return (a finished upload, a begun swap).
    public func cancel() { task.cancel() }
}
