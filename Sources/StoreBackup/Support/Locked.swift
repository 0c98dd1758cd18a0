import Foundation

/// A value shared between threads, read and written only while its lock is held.
///
/// The one lock-protected box the library's shared state goes through, so that the types
/// holding it are plainly `Sendable` (a `let` of this) instead of each claiming it unchecked.
// Unchecked: `value` is read and written only while `lock` is held.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock; keep it short and never block inside.
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    /// A copy of the value as it is now.
    var current: Value { withLock { $0 } }
}
