import Foundation

/// One request over libcurl, described as data so retry and logging can wrap it.
/// Secrets live only in `credentials` and are handed to libcurl in memory: never in a
/// URL, a log line or an error message.
struct TransferRequest: Sendable {
    enum Body: Sendable {
        case none
        case bytes(Data)
        /// A slice of a local file, streamed through libcurl's read callback.
        case file(path: String, offset: Int64, length: Int64)
    }

    enum ResponseSink: Sendable {
        /// Keep the body in memory, up to a limit (XML listings, JSON answers, errors).
        case memory(limit: Int)
        /// Stream the body into a local file, appending from `offset` (resumed downloads).
        case file(path: String, offset: Int64)
        /// Hash a success body with SHA-256 without keeping it (read-back checks);
        /// an error body goes to memory.
        case sha256
    }

    enum Credentials: Sendable {
        case none
        /// HTTP basic auth.
        case basic(user: String, password: String)
        /// AWS Signature V4 by libcurl (CURLOPT_AWS_SIGV4).
        case awsSigV4(accessKey: String, secretKey: String, region: String, service: String)
        /// OAuth 2 bearer token (Dropbox), sent as `Authorization: Bearer …` by libcurl.
        case bearer(token: String)
        /// SSH public-key auth (sftp://).
        case sshKey(user: String, privateKeyFile: String, publicKeyFile: String?, knownHostsFile: String)
    }

    var method: String
    var url: String
    var headers: [(String, String)] = []
    var body: Body = .none
    var sink: ResponseSink = .memory(limit: 8 << 20)
    var credentials: Credentials = .none
    /// sftp commands run after the transfer (e.g. "rename a b", "rm a").
    var postQuote: [String] = []
    /// sftp commands run before the transfer.
    var preQuote: [String] = []
    /// For sftp directory URLs: names only.
    var directoryListOnly = false
    /// Create missing remote folders on sftp uploads.
    var createMissingDirectories = false
    /// What to call this request in messages (never contains secrets).
    var label: String
}

/// What came back.
struct TransferResponse: Sendable {
    var status: Int
    /// Header names are lower-cased; the last value wins.
    var headers: [String: String]
    var body: Data
    var bytesReceived: Int64
    /// SHA-256 (hex) of the body, for the `.sha256` sink.
    var sha256: String? = nil

    func header(_ name: String) -> String? { headers[name.lowercased()] }
    var bodyText: String { String(decoding: body.prefix(4096), as: UTF8.self) }
}

/// A failed transfer, classified so the retry wrapper and the user know what to do.
public struct TransferError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure it was; decides whether a retry may help.
    public enum Kind: Sendable, Equatable {
        /// Connection refused, reset, DNS: worth retrying.
        case connection
        /// The connection or the transfer timed out (including a stalled transfer).
        case timeout
        /// TLS handshake or certificate verification failed.
        case tls
        /// The SSH host key is unknown or does not match known_hosts.
        case hostKey
        /// Wrong credentials (401/403, SSH auth refused).
        case authentication
        /// The server answered with an HTTP status that is not a success.
        case http(status: Int)
        /// The task was cancelled.
        case cancelled
        /// The remote file or folder does not exist (sftp).
        case notFound
        /// The server reported a condition that heals by itself (Dropbox
        /// `too_many_write_operations`), or the bytes that arrived differ from those sent:
        /// worth trying the whole operation again.
        case transient
        /// Anything else libcurl reported.
        case other
    }

    /// What kind of failure it was.
    public var kind: Kind
    /// A one-line explanation without secrets.
    public var message: String
    /// Seconds the server asked us to wait (Retry-After), when it said.
    public var retryAfter: Double?
    /// The libcurl result code behind a transport failure, when there was one.
    public var curlCode: Int?

    /// The same as ``message``.
    public var description: String { message }

    /// Whether trying again may succeed: network trouble, timeouts, 429, 5xx.
    public var isRetryable: Bool {
        switch kind {
        case .connection, .timeout, .transient: return true
        case .http(let status): return status == 429 || status == 408 || status >= 500
        default: return false
        }
    }
}

/// TLS and timeout settings shared by every remote destination.
public struct TransportOptions: Sendable {
    /// A PEM file of extra trusted CAs (--ca-file / STOREBACKUP_CA_FILE).
    public var caFile: String?
    /// Skip certificate verification (--insecure). Off unless asked for.
    public var insecure: Bool
    /// Seconds to wait for a connection (20 by default).
    public var connectTimeout: Int
    /// Abort when slower than `lowSpeedLimit` bytes/s for `lowSpeedTime` seconds.
    public var lowSpeedLimit: Int
    /// Seconds of slowness (below ``lowSpeedLimit``) after which a transfer is dropped.
    public var lowSpeedTime: Int

    /// Settings with the defaults the command line uses.
    public init(caFile: String? = nil, insecure: Bool = false, connectTimeout: Int = 20,
                lowSpeedLimit: Int = 1024, lowSpeedTime: Int = 60) {
        self.caFile = caFile
        self.insecure = insecure
        self.connectTimeout = connectTimeout
        self.lowSpeedLimit = lowSpeedLimit
        self.lowSpeedTime = lowSpeedTime
    }

    /// The defaults, with `STOREBACKUP_CA_FILE` from `environment` as ``caFile``.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> TransportOptions {
        TransportOptions(caFile: environment["STOREBACKUP_CA_FILE"].flatMap { $0.isEmpty ? nil : $0 })
    }
}
