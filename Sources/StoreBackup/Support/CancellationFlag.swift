import Foundation

/// A flag shared between an async task and the worker threads doing its blocking work.
/// Task cancellation sets it; every loop that may run long checks it.
public final class CancellationFlag: Sendable {
    private let cancelled = Locked(false)

    /// A flag that is not cancelled yet.
    public init() {}

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool { cancelled.current }

    /// Asks the work to stop at its next check; it then throws ``StoreBackupError/cancelled``.
    public func cancel() { cancelled.withLock { $0 = true } }

    func throwIfCancelled() throws {
        if isCancelled { throw StoreBackupError.cancelled }
    }
}
