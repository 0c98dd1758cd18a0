import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The one place the library starts threads: deflating (``CompressionPipeline``), inflating
/// (``ParallelInflater``), extracting and checking databases (``ParallelUnpacking``), uploading
/// S3 parts, and blocking calls made from async code (``runBlocking(name:_:)``).
///
/// Dedicated threads rather than Swift's cooperative pool: all of this work blocks (file
/// I/O, libcurl, SQLite, waiting for a buffer), and the cooperative pool must never block.
/// Every group is bounded: at most `width` threads, never more than ``maximumWidth``,
/// whatever the number of files, blocks or parts it works through, and all of them have
/// ended when ``run(name:width:batch:_:)``, ``forEach(_:name:width:cancel:worker:)`` or
/// ``Group/join()`` returns.
enum WorkerPool {
    /// The most threads one group may have (a guard against a width computed from input).
    static let maximumWidth = 16

    /// One thread per core: the width of CPU-bound work.
    static var cores: Int { max(1, ProcessInfo.processInfo.activeProcessorCount) }

    /// Threads that were started together; ``join()`` waits until all have ended.
    final class Group: Sendable {
        fileprivate let running = DispatchGroup()
        func join() { running.wait() }
    }

    /// The retry budget of the operation the current task or thread works for, carried by
    /// ``start(name:width:batch:stackSize:_:)`` onto the threads it starts (S3's parallel
    /// parts spend their operation's budget).
    @TaskLocal static var operationBudget: RetryBudget?

    /// Starts `width` threads (clamped to 1...``maximumWidth``), each running `body` with its
    /// number. With `batch`, the threads run as Linux `SCHED_BATCH`: the same share of the
    /// CPU, but an app thread that wakes up (say, after its commit's fsync) runs at once
    /// instead of waiting for our time slice to end.
    static func start(
        name: String, width: Int, batch: Bool = false, stackSize: Int? = nil,
        _ body: @escaping @Sendable (_ worker: Int) -> Void
    ) -> Group {
        let group = Group()
        // The starting operation's retry budget goes with its work onto the new threads.
        let budget = operationBudget
        for number in 0..<max(1, min(width, maximumWidth)) {
            group.running.enter()
            let thread = Thread {
                defer { group.running.leave() }
                if batch { yieldToInteractiveThreads() }
                $operationBudget.withValue(budget) { body(number) }
            }
            thread.name = width == 1 ? name : "\(name)-\(number)"
            if let stackSize { thread.stackSize = stackSize }
            thread.start()
        }
        return group
    }

    /// Runs `body` on `width` threads and waits for all of them; rethrows the first error.
    static func run(
        name: String, width: Int, batch: Bool = false,
        _ body: @escaping @Sendable (_ worker: Int) throws -> Void
    ) throws {
        let failure = FirstFailure()
        start(name: name, width: width, batch: batch) { number in
            do { try body(number) } catch { failure.record(error) }
        }.join()
        if let error = failure.first { throw error }
    }

    /// Hands each of `items` to one of `width` threads, in order. Each thread first calls
    /// `worker` once to set up what it keeps for all its items (a file handle, a buffer)
    /// and gets back the function it runs on each item. After the first error (or once
    /// `cancel` is set) no item starts; the error is rethrown when all threads have ended.
    ///
    /// With `lateWidth`, that many more threads join in once `lateGate` opens (or as soon
    /// as one of the first `width` threads has run out of items, then to find none left).
    static func forEach<Item: Sendable>(
        _ items: [Item], name: String, width: Int, lateWidth: Int = 0, lateGate: WorkerGate? = nil,
        cancel: CancellationFlag? = nil,
        worker: @escaping @Sendable () throws -> (Item) throws -> Void
    ) throws {
        guard !items.isEmpty else { return }
        let queue = SharedQueue(items)
        let failure = FirstFailure()
        let lateWidth = lateGate == nil ? 0 : lateWidth
        start(name: name, width: min(width + lateWidth, items.count)) { number in
            // A first thread that leaves lets the late ones go: they must never wait for ever.
            defer { if number < width { lateGate?.open() } }
            if number >= width { lateGate?.wait() }
            do {
                let handle = try worker()
                while !failure.hasFailed, let item = queue.next() {
                    try cancel?.throwIfCancelled()
                    try handle(item)
                }
            } catch {
                failure.record(error)
            }
        }.join()
        if let error = failure.first { throw error }
        try cancel?.throwIfCancelled()
    }

    /// ``forEach(_:name:width:cancel:worker:)`` for work that keeps nothing between items.
    static func forEach<Item: Sendable>(
        _ items: [Item], name: String, width: Int, cancel: CancellationFlag? = nil,
        _ body: @escaping @Sendable (Item) throws -> Void
    ) throws {
        try forEach(items, name: name, width: width, cancel: cancel) { body }
    }

    /// `transform` of each item on up to `width` threads, the results in the items' order.
    static func map<Item: Sendable, Result: Sendable>(
        _ items: [Item], name: String, width: Int, cancel: CancellationFlag? = nil,
        _ transform: @escaping @Sendable (Item) throws -> Result
    ) throws -> [Result] {
        let results = Locked([Result?](repeating: nil, count: items.count))
        try forEach(Array(items.indices), name: name, width: width, cancel: cancel) { index in
            let result = try transform(items[index])
            results.withLock { $0[index] = result }
        }
        return results.current.map { $0! }
    }

    /// Work handed in one item at a time while the caller goes on with other work: `width`
    /// threads take the items in order as they come. ``finish()`` waits for every item and
    /// rethrows the first error; after an error, later items are skipped.
    final class Feed<Item: Sendable>: Sendable {
        private let items = Locked<[Item?]>([])
        /// Items submitted and not yet done (or skipped), and what runs when none is left.
        private let outstanding = Locked<(count: Int, whenIdle: [@Sendable () -> Void])>((0, []))
        private let available = DispatchSemaphore(value: 0)
        private let failure = FirstFailure()
        private let width: Int
        private let group: Group

        init(name: String, width: Int, _ body: @escaping @Sendable (Item) throws -> Void) {
            let width = max(1, min(width, maximumWidth))
            let items = self.items, available = self.available, failure = self.failure, outstanding = self.outstanding
            self.width = width
            group = WorkerPool.start(name: name, width: width) { _ in
                while true {
                    available.wait()
                    // nil: the end, one per thread (see finish).
                    guard let item = items.withLock({ $0.removeFirst() }) else { return }
                    if !failure.hasFailed {
                        do { try body(item) } catch { failure.record(error) }
                    }
                    let idle = outstanding.withLock { state -> [@Sendable () -> Void] in
                        state.count -= 1
                        guard state.count == 0 else { return [] }
                        defer { state.whenIdle = [] }
                        return state.whenIdle
                    }
                    idle.forEach { $0() }
                }
            }
        }

        /// Runs `action` once no submitted item is left to do: now, if none is.
        func whenIdle(_ action: @escaping @Sendable () -> Void) {
            let idleNow = outstanding.withLock { state in
                if state.count == 0 { return true }
                state.whenIdle.append(action)
                return false
            }
            if idleNow { action() }
        }

        /// The first error an item threw so far, if any.
        var firstFailure: Error? { failure.first }

        func submit(_ item: Item) {
            outstanding.withLock { $0.count += 1 }
            items.withLock { $0.append(item) }
            available.signal()
        }

        /// Waits until every item submitted is done; rethrows the first error.
        func finish() throws {
            items.withLock { $0.append(contentsOf: [Item?](repeating: nil, count: width)) }
            for _ in 0..<width { available.signal() }
            group.join()
            if let error = failure.first { throw error }
        }
    }

    private static func yieldToInteractiveThreads() {
        #if os(Linux)
        var parameters = sched_param()
        _ = sched_setscheduler(0, 3 /* SCHED_BATCH; the Glibc module does not export the name */, &parameters)
        #endif
    }
}

/// Hands out items to several threads, each item once.
private final class SharedQueue<Item: Sendable>: Sendable {
    private let state: Locked<(items: [Item], position: Int)>
    init(_ items: [Item]) { state = Locked((items, 0)) }
    func next() -> Item? {
        state.withLock { state in
            guard state.position < state.items.count else { return nil }
            defer { state.position += 1 }
            return state.items[state.position]
        }
    }
}

/// Keeps the first error any thread hit.
final class FirstFailure: Sendable {
    private let error = Locked<Error?>(nil)
    var hasFailed: Bool { first != nil }
    var first: Error? { error.current }
    func record(_ error: Error) { self.error.withLock { if $0 == nil { $0 = error } } }
}

/// A running total that several threads add to (bytes done, for progress).
final class ByteCounter: Sendable {
    private let total = Locked<Int64>(0)
    /// Adds `bytes` and returns the new total.
    func add(_ bytes: Int64) -> Int64 {
        total.withLock {
            $0 += bytes; return $0
        }
    }
}

/// Runs blocking work on a thread of its own (never on Swift's cooperative pool, which
/// must not block) and turns task cancellation into the work's cancellation flag.
func runBlocking<T: Sendable>(
    name: String, _ work: @escaping @Sendable (CancellationFlag) throws -> T
) async throws -> T {
    let flag = CancellationFlag()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            _ = WorkerPool.start(name: name, width: 1, stackSize: 4 << 20) { _ in
                do { continuation.resume(returning: try work(flag)) } catch { continuation.resume(throwing: error) }
            }
        }
    } onCancel: {
        flag.cancel()
    }
}

/// Where threads wait until it opens, once and for good.
// Unchecked: `isOpen` is used only while `condition` is held.
final class WorkerGate: @unchecked Sendable {
    private let condition = NSCondition()
    private var isOpen = false

    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }

    func wait() {
        condition.lock()
        while !isOpen { condition.wait() }
        condition.unlock()
    }
}
