import Foundation

/// A flag shared between an async task and the worker threads doing its blocking work.
/// Task cancellation sets it; every loop that may run long checks it.
public final class CancellationFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false

    /// A flag that is not cancelled yet.
    public init() {}

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool { lock.withLock { cancelled } }

    /// Asks the work to stop at its next check; it then throws ``StoreBackupError/cancelled``.
    public func cancel() { lock.withLock { cancelled = true } }

    func throwIfCancelled() throws {
        if isCancelled { throw StoreBackupError.cancelled }
    }
}

/// Runs blocking work on its own thread (never on Swift's cooperative pool, which
/// must not block) and turns task cancellation into the work's cancellation flag.
func runBlocking<T: Sendable>(
    name: String, _ work: @escaping @Sendable (CancellationFlag) throws -> T
) async throws -> T {
    let flag = CancellationFlag()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            let thread = Thread {
                do { continuation.resume(returning: try work(flag)) } catch { continuation.resume(throwing: error) }
            }
            thread.name = name
            thread.stackSize = 4 << 20
            thread.start()
        }
    } onCancel: {
        flag.cancel()
    }
}
