/// One piece of work run on a thread of its own while the caller goes on, its result taken
/// later with ``value()``. A chain's restore opens the next backup this way while the step
/// before it runs on the other core. ``wait()`` joins the thread without taking the result
/// (a caller leaving on an error joins every thread it started).
final class BackgroundResult<Value: Sendable>: Sendable {
    private let result = Locked<Result<Value, any Error>?>(nil)
    private let thread: WorkerPool.Group

    init(name: String, _ body: @escaping @Sendable () throws -> Value) {
        let result = self.result
        thread = WorkerPool.start(name: name, width: 1) { _ in
            let outcome = Result { try body() }
            result.withLock { $0 = outcome }
        }
    }

    /// Waits for the work, then returns its value or rethrows its error.
    func value() throws -> Value {
        thread.join()
        guard let outcome = result.current else { preconditionFailure("a joined thread left no result") }
        return try outcome.get()
    }

    /// Waits for the work to end.
    func wait() { thread.join() }
}
