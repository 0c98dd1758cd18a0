import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A fixed-size byte buffer that is allocated once and reused.
// Unchecked: one owner at a time; a buffer changes threads only through its pool or a queue under a lock.
final class PooledBuffer: @unchecked Sendable {
    let bytes: UnsafeMutableRawPointer
    let capacity: Int
    var count = 0
    /// The pool this buffer goes back to.
    unowned let owner: BufferPool
    /// Mapped for this buffer alone (see ``BufferPool/init(count:capacity:mapped:)``).
    private let mapped: Bool

    init(capacity: Int, owner: BufferPool, mapped: Bool) {
        self.capacity = capacity
        self.owner = owner
        self.mapped = mapped
        if mapped {
            guard let memory = mmap(nil, max(1, capacity), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                memory != MAP_FAILED
            else { fatalError("out of memory for a \(capacity)-byte buffer") }
            bytes = memory
        } else {
            bytes = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 64)
        }
    }

    func recycle() { owner.give(self) }

    deinit {
        if mapped { munmap(bytes, max(1, capacity)) } else { bytes.deallocate() }
    }

    var contents: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: bytes, count: count) }
}

/// A fixed set of buffers: taking one blocks while all are in use. This is what bounds
/// the memory of the archive pipeline, whatever the size of the store.
// Unchecked: `free` and `closed` are used only with `condition` locked.
final class BufferPool: @unchecked Sendable {
    private let condition = NSCondition()
    private var free: [PooledBuffer] = []
    private var closed = false
    /// Released: buffers given back are freed instead of kept.
    private var released = false

    /// `mapped`: each buffer's memory is mapped for it alone and unmapped when it ends, so
    /// that ``release()`` gives it back to the system. From malloc, freed buffers of a
    /// megabyte can stay in the process (once glibc has raised its mmap threshold, such
    /// blocks come from the heap); malloc's reuse suits pools made again and again.
    init(count: Int, capacity: Int, mapped: Bool = false) {
        free = (0..<count).map { _ in PooledBuffer(capacity: capacity, owner: self, mapped: mapped) }
    }

    /// A free buffer, or nil once the pool is closed.
    func take() -> PooledBuffer? {
        condition.lock()
        defer { condition.unlock() }
        while free.isEmpty && !closed { condition.wait() }
        if closed { return nil }
        let buffer = free.removeLast()
        buffer.count = 0
        return buffer
    }

    func give(_ buffer: PooledBuffer) {
        condition.lock()
        if !released { free.append(buffer) }
        condition.signal()
        condition.unlock()
    }

    /// Wakes every waiter with nil; used when the pipeline stops.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// Closes the pool and frees the buffers in it now (buffers still out are freed when
    /// their last owner lets go).
    func release() {
        condition.lock()
        closed = true
        released = true
        free.removeAll()
        condition.broadcast()
        condition.unlock()
    }
}
