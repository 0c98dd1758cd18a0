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
        /// Write a success body with `pwrite` into an open file from `offset` on, at most
        /// `limit` bytes (a ranged read straight into the file it fills, so no answer is held
        /// in memory); a longer answer fails as ``RangedRead/answerTooLarge`` without writing
        /// past the limit. An error body goes to memory.
        case positioned(descriptor: Int32, offset: Int64, limit: Int)
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
    /// Only these bytes of the answer (``RangedRead``): a `Range` header over HTTP,
    /// `CURLOPT_RANGE` over sftp.
    var byteRange: Range<Int64>? = nil
    /// What to call this request in messages (never contains secrets).
    var label: String
    /// Answers besides 408, 429 and 5xx that the service documents as "try again later"
    /// (Dropbox's 409 `too_many_write_operations`, S3's 400 `BadDigest` after a damaged
    /// body): the transport retries them within the operation's ``RetryBudget``.
    var isTransientAnswer: (@Sendable (TransferResponse) -> Bool)? = nil
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
    /// Bytes of a success body the `.positioned` sink wrote.
    var bytesWritten: Int64 = 0

    func header(_ name: String) -> String? { headers[name.lowercased()] }
    var bodyText: String { String(decoding: body.prefix(4096), as: UTF8.self) }
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
    /// The command's cap on bytes sent (`--limit-upload`), shared by all its transfers.
    public var uploadLimit: RateLimit?
    /// The command's cap on bytes received (`--limit-download`), shared by all its transfers.
    public var downloadLimit: RateLimit?

    /// Settings with the defaults the command line uses.
    public init(
        caFile: String? = nil, insecure: Bool = false, connectTimeout: Int = 20,
        lowSpeedLimit: Int = 1024, lowSpeedTime: Int = 60
    ) {
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
