import XCTest

@testable import StoreBackup

/// The late threads of ``WorkerPool/forEach(_:name:width:lateWidth:lateGate:cancel:worker:)``
/// (a restore's core lent by the databases' checks) and ``WorkerPool/Feed/whenIdle(_:)``.
final class WorkerPoolTests: XCTestCase {
    func testLateThreadsTakeNoItemBeforeTheGateOpensAndSomeAfter() throws {
        let gate = WorkerGate()
        let opened = Locked(false)
        let lateWorked = DispatchSemaphore(value: 0)
        let lateItems = Locked(0)
        // Only the first thread can take item 0 (the gate is closed then): it is known by that.
        let firstThread = Locked<pthread_t?>(nil)
        // The first thread opens the gate at item 100, then waits until the late one has
        // taken an item (which it may only do after the gate opened).
        try WorkerPool.forEach(Array(0..<200), name: "late-test", width: 1, lateWidth: 1, lateGate: gate) {
            { item in
                if item == 0 { firstThread.withLock { $0 = pthread_self() } }
                if firstThread.current.map({ pthread_equal($0, pthread_self()) == 0 }) ?? true {
                    XCTAssertTrue(opened.current, "a late thread worked before the gate opened")
                    let isFirst = lateItems.withLock { count -> Bool in
                        count += 1
                        return count == 1
                    }
                    if isFirst { lateWorked.signal() }
                    return
                }
                if item == 100 {
                    opened.withLock { $0 = true }
                    gate.open()
                    XCTAssertEqual(lateWorked.wait(timeout: .now() + 30), .success, "the late thread never joined in")
                }
            }
        }
        XCTAssertGreaterThan(lateItems.current, 0)
    }

    func testLateThreadsDoNotWaitForAGateThatNeverOpens() throws {
        let done = Locked(0)
        // Nothing opens the gate: forEach must still end once the first thread runs out.
        try WorkerPool.forEach(Array(0..<50), name: "late-never", width: 1, lateWidth: 1, lateGate: WorkerGate()) {
            { _ in done.withLock { $0 += 1 } }
        }
        XCTAssertEqual(done.current, 50)
    }

    func testLateThreadsAreLetGoWhenTheFirstOnesFail() {
        struct Stop: Error {}
        XCTAssertThrowsError(
            try WorkerPool.forEach(Array(0..<50), name: "late-fail", width: 1, lateWidth: 1, lateGate: WorkerGate()) {
                { item in if item == 3 { throw Stop() } }
            }
        ) { XCTAssert($0 is Stop) }
    }

    func testWhenIdleRunsOnceEverySubmittedItemIsDone() throws {
        let finished = Locked(0)
        let release = DispatchSemaphore(value: 0)
        let feed = WorkerPool.Feed<Int>(name: "idle-test", width: 1) { _ in
            release.wait()
            finished.withLock { $0 += 1 }
        }
        feed.submit(1)
        feed.submit(2)
        let idleSeen = DispatchSemaphore(value: 0)
        let finishedWhenIdle = Locked(-1)
        feed.whenIdle {
            finishedWhenIdle.withLock { $0 = finished.current }
            idleSeen.signal()
        }
        release.signal()
        release.signal()
        idleSeen.wait()
        XCTAssertEqual(finishedWhenIdle.current, 2, "idle only after both items")
        try feed.finish()

        // Nothing outstanding: the action runs at once.
        let idleFeed = WorkerPool.Feed<Int>(name: "idle-now", width: 1) { _ in }
        let ranNow = Locked(false)
        idleFeed.whenIdle { ranNow.withLock { $0 = true } }
        XCTAssertTrue(ranNow.current)
        try idleFeed.finish()
    }
}
