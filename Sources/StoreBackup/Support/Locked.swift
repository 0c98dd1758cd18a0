import Foundation
import Synchronization

/// A value shared between threads, read and written only while its lock is held.
///
/// The one lock-protected box the library's shared state goes through, so that the types
/// holding it are plainly `Sendable` (a `let` of this) instead of each claiming it unchecked.
/// A class around Swift's `Mutex` (a value that cannot be copied), so that it can be shared.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    /// Runs `body` with the value, under the lock; keep it short and never block inside.
    func withLock<Result: Sendable>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try mutex.withLock { value in try body(&value) }
    }

    /// A copy of the value as it is now.
    var current: Value { withLock { $0 } }
}
