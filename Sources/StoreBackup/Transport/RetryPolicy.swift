import Foundation
import Logging

/// How often and how patiently to retry. Defaults follow rclone: 10 low-level retries
/// per request, 3 retries of a whole operation.
public struct RetryPolicy: Sendable {
    /// Tries per request (network errors, timeouts, 408, 429, 5xx).
    public var requestAttempts: Int
    /// Tries of a whole operation (upload, download, list, delete) after its requests gave up.
    public var operationAttempts: Int
    /// First backoff; doubles each time up to `maximumDelay`, with full jitter.
    public var initialDelay: Double
    /// Longest wait between tries, in seconds.
    public var maximumDelay: Double

    /// A policy; the defaults are those of the command line.
    public init(requestAttempts: Int = 10, operationAttempts: Int = 3, initialDelay: Double = 0.2, maximumDelay: Double = 20) {
        self.requestAttempts = requestAttempts
        self.operationAttempts = operationAttempts
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// The default policy, with `STOREBACKUP_RETRY_ATTEMPTS` (tries per request) and
    /// `STOREBACKUP_RETRY_OPERATIONS` (tries per whole operation) when set to a number ≥ 1:
    /// a scheduled job that should fail fast, or a flaky link that needs more patience.
    public static func fromEnvironment(_ environment: [String: String]) -> RetryPolicy {
        var policy = RetryPolicy()
        if let text = environment["STOREBACKUP_RETRY_ATTEMPTS"], let value = Int(text), value >= 1 { policy.requestAttempts = value }
        if let text = environment["STOREBACKUP_RETRY_OPERATIONS"], let value = Int(text), value >= 1 { policy.operationAttempts = value }
        return policy
    }

    /// The wait before attempt `attempt + 1`: the server's Retry-After when it gave one
    /// (capped), else exponential backoff with full jitter.
    func delay(afterAttempt attempt: Int, retryAfter: Double?) -> Double {
        if let retryAfter { return min(max(retryAfter, 0), 120) }
        let ceiling = min(maximumDelay, initialDelay * pow(2, Double(attempt - 1)))
        return Double.random(in: ceiling / 2...ceiling)
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

/// The one place requests are retried: wraps `CurlTransfer` for every remote destination.
/// Retries network failures, timeouts, 429, 408 and 5xx with backoff (Retry-After honoured);
/// never retries 4xx answers that cannot heal. A download into a file resumes where it
/// stopped (HTTP Range, or SFTP resume) instead of starting over.
struct RetryingTransport: Sendable {
    let transfer: CurlTransfer
    let policy: RetryPolicy
    /// Where each retry is noted (debug level).
    let logger: Logger

    init(options: TransportOptions, policy: RetryPolicy = RetryPolicy(), logger: Logger = .disabled) {
        transfer = CurlTransfer(options: options)
        self.policy = policy
        self.logger = logger
    }

    func perform(_ request: TransferRequest, cancel: CancellationFlag?,
                 progress: (@Sendable (Int64, Int64) -> Void)? = nil) throws -> TransferResponse {
        var attempt = 1
        var current = request
        var confirmedRefusal = false
        while true {
            do {
                let response = try transfer.perform(current, cancel: cancel, progress: progress)
                let retryable = response.status == 429 || response.status == 408 || response.status >= 500
                guard retryable && attempt < policy.requestAttempts else { return response }
                try RetryPolicy.wait(seconds: policy.delay(afterAttempt: attempt, retryAfter: Self.retryAfter(response)), cancel: cancel)
            } catch StoreBackupError.transfer(let failure) where failure.isRetryable && attempt < policy.requestAttempts {
                let delay = policy.delay(afterAttempt: attempt, retryAfter: failure.retryAfter)
                logger.debug("retrying a request", metadata: ["request": "\(request.label)", "attempt": "\(attempt + 1)",
                                                              "delay": "\(delay)", "error": "\(failure.message)"])
                try RetryPolicy.wait(seconds: delay, cancel: cancel)
            } catch StoreBackupError.transfer(let failure) where Self.needsConfirmation(failure, request) && !confirmedRefusal && attempt < policy.requestAttempts {
                // libssh2 reports a connection cut during authentication as a refused key;
                // only a refusal on a second, fresh connection is believed.
                confirmedRefusal = true
                try RetryPolicy.wait(seconds: policy.delay(afterAttempt: attempt, retryAfter: nil), cancel: cancel)
            }
            attempt += 1
            current = Self.resumed(request)
        }
    }

    /// An SSH key refusal, which is believed only when it happens twice.
    static func needsConfirmation(_ error: TransferFailure, _ request: TransferRequest) -> Bool {
        error.kind == .authentication && request.url.hasPrefix("sftp://")
    }

    /// Retry-After in seconds (the HTTP-date form is treated as "soon").
    static func retryAfter(_ response: TransferResponse) -> Double? {
        guard let value = response.header("retry-after") else { return nil }
        return Double(value.trimmingCharacters(in: .whitespaces)) ?? 1
    }

    /// The same request, continuing a file download from what already arrived.
    static func resumed(_ request: TransferRequest) -> TransferRequest {
        guard case .file(let path, _) = request.sink else { return request }
        var info = stat()
        guard stat(path, &info) == 0, info.st_size > 0 else { return request }
        var copy = request
        copy.sink = .file(path: path, offset: Int64(info.st_size))
        if request.url.hasPrefix("http") {
            copy.headers.removeAll { $0.0.lowercased() == "range" }
            copy.headers.append(("Range", "bytes=\(info.st_size)-"))
        }
        return copy
    }
}
