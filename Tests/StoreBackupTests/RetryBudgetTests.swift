import Foundation
import XCTest

@testable import StoreBackup

/// The one retry layer: an operation's budget is shared by every request it makes, on
/// whichever thread the request runs, and never grants a pause that ends past it.
final class RetryBudgetTests: XCTestCase {
    /// `RetryingDestination` binds the budget on its task; the blocking work runs on
    /// threads of its own (`runBlocking`, S3's parallel parts through `WorkerPool`), and
    /// each of them must see that same budget, not open a fresh one per request.
    func testTheOperationBudgetReachesEveryWorkerThread() async throws {
        let budget = RetryBudget(policy: RetryPolicy(budget: 60))
        let seen = try await RetryBudget.withCurrent(budget) {
            try await runBlocking(name: "budget-test") { _ in
                let outer = RetryBudget.current === budget
                let parts = try WorkerPool.map(Array(1...4), name: "budget-test-part", width: 4) { _ in RetryBudget.current === budget }
                return [outer] + parts
            }
        }
        XCTAssertEqual(seen, [true, true, true, true, true])
        let outside = try await runBlocking(name: "budget-test") { _ in RetryBudget.current == nil }
        XCTAssertTrue(outside, "no budget leaks to work started outside an operation")
    }

    func testABudgetGrantsPausesUntilItsDeadlineAndSaysWhenItRefused() {
        let start = Date()
        let budget = RetryBudget(policy: RetryPolicy(budget: 10), now: start)
        XCTAssertEqual(budget.deadline, start.addingTimeInterval(10))
        XCTAssertTrue(budget.allows(delay: 1))
        XCTAssertTrue(budget.allows(delay: 2))
        XCTAssertEqual(budget.retriesSpent, 2)
        XCTAssertFalse(budget.isSpent)
        XCTAssertFalse(budget.allows(delay: 11))
        XCTAssertTrue(budget.isSpent)
        XCTAssertEqual(budget.retriesSpent, 2)
        XCTAssertFalse(RetryBudget(policy: RetryPolicy(budget: 0)).allows(delay: 0.001), "a zero budget retries nothing")
    }

    func testBackoffIsFullJitterUnderAGrowingCeilingAndHonoursRetryAfter() {
        let policy = RetryPolicy(initialDelay: 0.2, maximumDelay: 20)
        for attempt in 1...12 {
            let ceiling = min(20, 0.2 * pow(2, Double(attempt - 1)))
            for _ in 0..<50 { XCTAssertTrue((0...ceiling).contains(policy.delay(afterAttempt: attempt, retryAfter: nil))) }
        }
        XCTAssertEqual(policy.delay(afterAttempt: 1, retryAfter: 7), 7)
        XCTAssertEqual(policy.delay(afterAttempt: 1, retryAfter: 900), 120, "a huge Retry-After is capped")
    }

    func testEnvironmentSetsTheBudgetAndTheOldCapsStillWork() {
        let policy = RetryPolicy.fromEnvironment([
            "STOREBACKUP_RETRY_FOR": "90s", "STOREBACKUP_RETRY_ATTEMPTS": "2",
            "STOREBACKUP_RETRY_OPERATIONS": "1",
        ])
        XCTAssertEqual(policy.budget, 90)
        XCTAssertEqual(policy.requestAttempts, 2)
        XCTAssertEqual(policy.operationAttempts, 1)
        let defaults = RetryPolicy.fromEnvironment([:])
        XCTAssertEqual(defaults.budget, 300)
        XCTAssertEqual(defaults.requestAttempts, .max)
    }
}
