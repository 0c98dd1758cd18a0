import Foundation

/// How patiently to retry: a budget by time for each whole operation (an upload, a
/// download, a listing, a delete), spent by every retry inside it, whichever request
/// needed one. Waits grow exponentially with full jitter, and a server's `Retry-After`
/// is honoured, so a busy service is given minutes, not a handful of quick tries.
public struct RetryPolicy: Sendable {
    /// Seconds an operation may keep retrying, from its start (`--retry-for`, `retry-for:`,
    /// `STOREBACKUP_RETRY_FOR`); 0 means no retries. A try already under way is never cut short.
    public var budget: Double
    /// An extra cap on tries per request (`STOREBACKUP_RETRY_ATTEMPTS`); none by default.
    public var requestAttempts: Int
    /// An extra cap on tries of a whole operation (`STOREBACKUP_RETRY_OPERATIONS`); none by default.
    public var operationAttempts: Int
    /// First backoff; doubles each time up to `maximumDelay`, with full jitter.
    public var initialDelay: Double
    /// Longest wait between tries, in seconds.
    public var maximumDelay: Double

    /// The default budget: 5 minutes per operation, enough for a nightly job to outwait a
    /// busy service, short enough that a dead one is reported the same night.
    public static let defaultBudget: Double = 300

    /// A policy; the defaults are those of the command line.
    public init(
        budget: Double = RetryPolicy.defaultBudget, requestAttempts: Int = .max, operationAttempts: Int = .max,
        initialDelay: Double = 0.2, maximumDelay: Double = 20
    ) {
        self.budget = budget
        self.requestAttempts = requestAttempts
        self.operationAttempts = operationAttempts
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// The default policy, with `STOREBACKUP_RETRY_FOR` (a duration: `90s`, `5m`) as the
    /// budget, and `STOREBACKUP_RETRY_ATTEMPTS` (tries per request) and
    /// `STOREBACKUP_RETRY_OPERATIONS` (tries per operation) as caps when set to a number ≥ 1:
    /// a scheduled job that should fail fast, or a flaky link that needs more patience.
    public static func fromEnvironment(_ environment: [String: String]) -> RetryPolicy {
        var policy = RetryPolicy()
        if let text = environment["STOREBACKUP_RETRY_FOR"], let value = try? DurationText.parseSeconds(text) { policy.budget = value }
        if let text = environment["STOREBACKUP_RETRY_ATTEMPTS"], let value = Int(text), value >= 1 { policy.requestAttempts = value }
        if let text = environment["STOREBACKUP_RETRY_OPERATIONS"], let value = Int(text), value >= 1 { policy.operationAttempts = value }
        return policy
    }

    /// The wait before attempt `attempt + 1`: the server's Retry-After when it gave one
    /// (capped), else exponential backoff with full jitter.
    func delay(afterAttempt attempt: Int, retryAfter: Double?) -> Double {
        if let retryAfter { return min(max(retryAfter, 0), 120) }
        let ceiling = min(maximumDelay, initialDelay * pow(2, Double(min(attempt, 60) - 1)))
        return Double.random(in: 0...ceiling)
    }

    /// Sleeps (a retry backoff, not synchronisation), waking early on cancellation.
    static func wait(seconds: Double, cancel: CancellationFlag?) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            try cancel?.throwIfCancelled()
            usleep(UInt32(min(0.05, max(0, deadline.timeIntervalSinceNow)) * 1_000_000))
        }
        try cancel?.throwIfCancelled()
    }
}

/// The time one operation may still spend retrying, shared by every request it makes
/// (S3's parallel parts included): a retried part spends the same budget as the rest.
/// ``RetryingDestination`` opens one per operation and binds it to ``current``;
/// ``WorkerPool`` carries it onto the threads it starts.
final class RetryBudget: Sendable {
    let policy: RetryPolicy
    let deadline: Date
    private let retries = Locked(0)
    private let refused = Locked(false)

    init(policy: RetryPolicy, now: Date = Date()) {
        self.policy = policy
        deadline = now.addingTimeInterval(max(0, policy.budget))
    }

    /// The operation's budget on this task or thread, if one is open.
    static var current: RetryBudget? { WorkerPool.operationBudget }

    /// Runs `body` with `budget` as ``current`` (and on every worker thread it starts).
    static func withCurrent<T>(_ budget: RetryBudget, _ body: () async throws -> T) async rethrows -> T {
        try await WorkerPool.$operationBudget.withValue(budget, operation: body)
    }

    /// Whether a wait of `delay` seconds still ends inside the budget; counts the retry when it does.
    func allows(delay: Double) -> Bool {
        guard Date().addingTimeInterval(delay) <= deadline else {
            refused.withLock { $0 = true }
            return false
        }
        retries.withLock { $0 += 1 }
        return true
    }

    /// After the `attempt`th try of a whole operation failed with `failure`: the wait before
    /// the next try, or nil when there is none (a failure that cannot heal, the cap on
    /// operation tries, or a wait past the budget). The one rule for retrying an operation.
    func delayBeforeRetrying(_ failure: TransferFailure, attempt: Int) -> Double? {
        guard failure.isRetryable else { return nil }
        let delay = policy.delay(afterAttempt: attempt, retryAfter: failure.retryAfter)
        guard attempt < policy.operationAttempts, allows(delay: delay) else { return nil }
        return delay
    }

    /// Retries spent so far.
    var retriesSpent: Int { retries.current }

    /// Whether a retry was refused because the budget ran out (as opposed to a cap on
    /// tries, or a failure that cannot heal).
    var isSpent: Bool { refused.current }
}
