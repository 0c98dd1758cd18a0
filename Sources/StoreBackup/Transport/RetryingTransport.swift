import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Wraps `CurlTransfer` for every remote destination: the place requests are retried.
/// Retries network failures, timeouts, 408, 429, 5xx and the answers a service documents
/// as transient (``TransferRequest/isTransientAnswer``) with backoff (Retry-After
/// honoured), inside the operation's ``RetryBudget``; never retries 4xx answers that
/// cannot heal. A download into a file resumes where it stopped (HTTP Range, or SFTP
/// resume) instead of starting over.
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

    func perform(
        _ request: TransferRequest, cancel: CancellationFlag?,
        progress: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws -> TransferResponse {
        // Outside an operation (a token refresh during `auth`), the request has a budget of its own.
        let budget = RetryBudget.current ?? RetryBudget(policy: policy)
        var attempt = 1
        var current = request
        var confirmedRefusal = false
        while true {
            do {
                let response = try transfer.perform(current, cancel: cancel, progress: progress)
                guard Self.isTransient(response, request) && attempt < policy.requestAttempts else { return response }
                let delay = policy.delay(afterAttempt: attempt, retryAfter: Self.retryAfter(response))
                guard budget.allows(delay: delay) else { return response }
                logger.debug(
                    "retrying a request",
                    metadata: [
                        "request": "\(request.label)", "attempt": "\(attempt + 1)",
                        "delay": "\(delay)", "status": "\(response.status)",
                    ])
                try RetryPolicy.wait(seconds: delay, cancel: cancel)
            } catch StoreBackupError.transfer(let failure) where failure.isRetryable && attempt < policy.requestAttempts {
                let delay = policy.delay(afterAttempt: attempt, retryAfter: failure.retryAfter)
                guard budget.allows(delay: delay) else { throw StoreBackupError.transfer(failure) }
                logger.debug(
                    "retrying a request",
                    metadata: [
                        "request": "\(request.label)", "attempt": "\(attempt + 1)",
                        "delay": "\(delay)", "error": "\(failure.message)",
                    ])
                try RetryPolicy.wait(seconds: delay, cancel: cancel)
            } catch StoreBackupError.transfer(let failure)
                where Self.needsConfirmation(failure, request) && !confirmedRefusal && attempt < policy.requestAttempts
            {
                // libssh2 reports a connection cut during authentication as a refused key;
                // only a refusal on a second, fresh connection is believed.
                confirmedRefusal = true
                let delay = policy.delay(afterAttempt: attempt, retryAfter: nil)
                guard budget.allows(delay: delay) else { throw StoreBackupError.transfer(failure) }
                try RetryPolicy.wait(seconds: delay, cancel: cancel)
            }
            attempt += 1
            current = Self.resumed(request)
        }
    }

    /// Whether an answer is one that heals by waiting: 408, 429, 5xx (S3's `SlowDown` is a
    /// 503), or what the request's service documents as transient.
    static func isTransient(_ response: TransferResponse, _ request: TransferRequest) -> Bool {
        if response.status == 429 || response.status == 408 || response.status >= 500 { return true }
        return request.isTransientAnswer?(response) ?? false
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
