import Foundation
import Logging

/// Everything a remote destination may need besides its URL.
///
/// Credentials come, in this order of precedence, from: a credentials file named on the
/// command line (`--credentials FILE`), the environment (`AWS_ACCESS_KEY_ID`,
/// `STOREBACKUP_WEBDAV_PASSWORD`, …), then `~/.config/storebackup/credentials`.
/// Credentials files must not be readable by group or others (chmod 600).
public struct DestinationOptions: Sendable {
    /// TLS and timeout settings for remote destinations.
    public var transport: TransportOptions
    /// How remote destinations retry.
    public var retry: RetryPolicy
    /// S3 endpoint for S3-compatible services (--s3-endpoint / AWS_ENDPOINT_URL); path-style addressing.
    public var s3Endpoint: String?
    /// SSH private key for sftp:// (--ssh-key); default ~/.ssh/id_ed25519, then ~/.ssh/id_rsa.
    public var sshKey: String?
    /// known_hosts file for sftp:// (--known-hosts); default ~/.ssh/known_hosts.
    public var knownHosts: String?
    /// A credentials file named explicitly (--credentials).
    public var credentialsFile: String?
    /// Where credentials and settings are looked up after ``credentialsFile``; the process environment by default.
    public var environment: [String: String]
    /// Where remote destinations note their retries (debug and info levels); silent by default.
    public var logger: Logger
    /// Lock each new backup for a number of days (S3 Object Lock); nil: no lock. Any
    /// destination but S3 refuses to be resolved with it.
    public var objectLock: ObjectLockRetention?

    /// Options; `transport` defaults to ``TransportOptions/fromEnvironment(_:)`` of `environment`,
    /// `retry` to ``RetryPolicy/fromEnvironment(_:)``; `logger` to one that drops everything.
    public init(
        transport: TransportOptions? = nil, retry: RetryPolicy? = nil, s3Endpoint: String? = nil,
        sshKey: String? = nil, knownHosts: String? = nil, credentialsFile: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment, logger: Logger = .disabled
    ) {
        self.transport = transport ?? TransportOptions.fromEnvironment(environment)
        self.retry = retry ?? RetryPolicy.fromEnvironment(environment)
        self.s3Endpoint = s3Endpoint
        self.sshKey = sshKey
        self.knownHosts = knownHosts
        self.credentialsFile = credentialsFile
        self.environment = environment
        self.logger = logger
    }

    var home: String { environment["HOME"] ?? NSHomeDirectory() }

    /// A secret or setting by its environment name, following the documented precedence.
    /// Credentials files hold `NAME=value` lines with the same names as the environment.
    func credential(_ name: String) throws -> String? {
        if let file = credentialsFile, let value = try Self.readCredentialsFile(file, required: true)[name] { return value }
        if let value = environment[name], !value.isEmpty { return value }
        let defaultFile = home + "/.config/storebackup/credentials"
        return try Self.readCredentialsFile(defaultFile, required: false)[name]
    }

    static func readCredentialsFile(_ path: String, required: Bool) throws -> [String: String] {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if required { throw StoreBackupError.invalidDestination(url: path, reason: "credentials file not found") }
            return [:]
        }
        guard info.st_mode & 0o077 == 0 else {
            throw StoreBackupError.invalidDestination(url: path, reason: "credentials file is readable by others; run chmod 600 on it")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw StoreBackupError.invalidDestination(url: path, reason: "credentials file cannot be read")
        }
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.hasPrefix("#"), let equals = trimmed.firstIndex(of: "=") else { continue }
            let key = trimmed[..<equals].trimmingCharacters(in: .whitespaces)
            var value = trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            values[key] = value
        }
        return values
    }
}

/// Percent-encoding for URL paths built from backup names (spaces, brackets, …).
enum URLPath {
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// Encodes each segment; "/" between segments stays literal.
    static func encode(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.addingPercentEncoding(withAllowedCharacters: unreserved) ?? String($0) }
            .joined(separator: "/")
    }

    /// Encodes everything, "/" included (query values).
    static func encodeComponent(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
    }
}
