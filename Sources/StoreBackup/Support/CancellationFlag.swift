import Foundation

/// A flag shared between an async task and the worker threads doing its blocking work.
/// Task cancellation sets it; every loop that may run long checks it.
final class CancellationFlag: Sendable {
    private let cancelled = Locked(false)

    /// A flag that is not cancelled yet.
    init() {}

    /// Whether ``cancel()`` has been called.
    var isCancelled: Bool { cancelled.current }

    /// Asks the work to stop at its next check; it then throws ``StoreBackupError/cancelled``.
    func cancel() { cancelled.withLock { $0 = true } }

    func throwIfCancelled() throws {
        if isCancelled { throw StoreBackupError.cancelled }
    }
}
