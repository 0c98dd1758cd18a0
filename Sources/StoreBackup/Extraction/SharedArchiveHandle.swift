import Foundation

/// The reader's one libzip handle, shared by the threads that extract files.
///
/// Every libzip handle holds its own copy of the central directory, the largest memory per
/// entry: extraction opens none of its own. libzip handles are not thread-safe, so each
/// call on the handle, or on an entry opened through it, is made under ``lock``; libzip
/// reads each open entry at its own offset, so entries opened by different threads may be
/// read in turns. Inflating happens inside those calls, while hashing and writing (most of
/// a small file's time) run outside the lock, side by side.
final class SharedArchiveHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    let lock = NSLock()

    /// `pointer` stays the lender's to discard.
    init(borrowing pointer: OpaquePointer) { self.pointer = pointer }

    func withLock<T>(_ body: (OpaquePointer) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(pointer)
    }
}
