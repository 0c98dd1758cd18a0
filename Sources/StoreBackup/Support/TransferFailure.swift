/// Why a transfer to or from a destination failed, as data: the cause of
/// ``StoreBackupError/transfer(_:)``.
///
/// Each backend classifies its own failures: libcurl's result code (never its message
/// text), the HTTP status, and the service's own error code (S3's `NoSuchKey`,
/// Dropbox's `path/conflict/file`, an OAuth `invalid_grant`). ``message`` is one line for
/// a person, naming the destination and never a secret; ``remedy`` says what would help.
public struct TransferFailure: Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure it was; decides whether trying again may help.
    public enum Kind: Sendable, Equatable {
        /// Connection refused, reset or cut, DNS: worth retrying.
        case connection
        /// The connection or the transfer timed out (including a stalled transfer).
        case timeout
        /// TLS handshake or certificate verification failed.
        case tls
        /// The SSH host key is unknown or does not match known_hosts.
        case hostKey
        /// Wrong credentials (SSH key refused; HTTP services answer ``http(status:)`` 401/403).
        case authentication
        /// The server answered with an HTTP status that is not a success.
        case http(status: Int)
        /// The remote file or folder does not exist (sftp).
        case notFound
        /// A condition that heals by itself (Dropbox `too_many_write_operations`), or the
        /// bytes that arrived differ from those sent: worth trying the whole operation again.
        case transient
        /// Anything else.
        case other
    }

    /// What kind of failure it was.
    public var kind: Kind
    /// One line for a person, without secrets; names the destination once the backend has seen it.
    public var message: String
    /// The libcurl result code (`CURLcode`) behind a transport failure, when there was one.
    public var curlCode: Int?
    /// The service's own error code when it gave one: S3's `Code` (`NoSuchKey`,
    /// `SignatureDoesNotMatch`), Dropbox's error tags (`path/conflict/file`), OAuth's `error`.
    public var serviceCode: String?
    /// Seconds the server asked us to wait (`Retry-After`), when it said.
    public var retryAfter: Double?
    /// What would help, when something specific would.
    public var remedy: Remedy?
    /// The failing layer's own words, without the request label (libcurl's text, a
    /// server's summary): the part a backend's rewritten message quotes.
    var detail: String

    /// A failure whose message is `label: detail` (`detail` alone without a label).
    init(
        kind: Kind, label: String, detail: String, curlCode: Int? = nil, serviceCode: String? = nil,
        retryAfter: Double? = nil, remedy: Remedy? = nil
    ) {
        self.kind = kind
        self.message = label.isEmpty ? detail : "\(label): \(detail)"
        self.detail = detail
        self.curlCode = curlCode
        self.serviceCode = serviceCode
        self.retryAfter = retryAfter
        self.remedy = remedy
    }

    /// A failure, for a ``BackupDestination`` of your own: thrown as
    /// ``StoreBackupError/transfer(_:)``, ``RetryingDestination`` retries it when
    /// ``isRetryable``.
    public init(
        kind: Kind, message: String, curlCode: Int? = nil, serviceCode: String? = nil,
        retryAfter: Double? = nil, remedy: Remedy? = nil
    ) {
        self.init(
            kind: kind, label: "", detail: message, curlCode: curlCode, serviceCode: serviceCode,
            retryAfter: retryAfter, remedy: remedy)
    }

    /// The HTTP status the server answered with, for ``Kind/http(status:)`` failures.
    public var httpStatus: Int? {
        if case .http(let status) = kind { return status }
        return nil
    }

    /// Whether trying again may succeed: network trouble, timeouts, 408, 429, 5xx, transient conditions.
    public var isRetryable: Bool {
        switch kind {
        case .connection, .timeout, .transient: return true
        case .http(let status): return status == 429 || status == 408 || status >= 500
        default: return false
        }
    }

    /// The same as ``message``.
    public var description: String { message }
}

extension StoreBackupError {
    /// A ``transfer(_:)`` error; the shorthand the transport and the backends throw.
    static func transferFailed(
        _ kind: TransferFailure.Kind, label: String, _ detail: String, curlCode: Int? = nil,
        serviceCode: String? = nil, retryAfter: Double? = nil, remedy: Remedy? = nil
    ) -> StoreBackupError {
        .transfer(
            TransferFailure(
                kind: kind, label: label, detail: detail, curlCode: curlCode, serviceCode: serviceCode,
                retryAfter: retryAfter, remedy: remedy))
    }
}
