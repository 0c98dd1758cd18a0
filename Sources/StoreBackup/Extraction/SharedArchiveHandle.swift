import Foundation

/// The reader's one libzip handle, shared by the threads that extract files.
///
/// Every libzip handle holds its own copy of the central directory, the largest memory per
/// entry: extraction opens none of its own, and borrows the reader's only when an entry
/// needs libzip (``ArchiveReader/idleHandle``; a reader that listed its entries without
/// libzip has none until then, and small files and blocks of a backup file on this machine
/// are read without it). libzip handles are not thread-safe, so each call on the handle, or
/// on an entry opened through it, is made under ``lock``; libzip reads each open entry at
/// its own offset, so entries opened by different threads may be read in turns. Inflating
/// happens inside those calls, while hashing and writing run outside the lock, side by side.
final class SharedArchiveHandle: @unchecked Sendable {
    private let reader: ArchiveReader
    /// Set under ``lock`` on first use.
    private var borrowed: OpaquePointer?
    let lock = NSLock()

    /// The handle stays the reader's to discard.
    init(reader: ArchiveReader) { self.reader = reader }

    /// Runs `body` with the handle, `lock` held.
    func withLock<T>(_ body: (OpaquePointer) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(try handle())
    }

    /// The handle, borrowed from the reader on first use; call with `lock` held.
    func handle() throws -> OpaquePointer {
        if let borrowed { return borrowed }
        let handle = try reader.idleHandle
        borrowed = handle
        return handle
    }
}
