import Foundation
import Synchronization

/// The secrets a Dropbox destination may have, read with the usual precedence
/// (`--credentials FILE`, then the environment, then `~/.config/storebackup/credentials`):
///
/// - `STOREBACKUP_DROPBOX_TOKEN`: an access token used as is (a long-lived one, or a
///   short-lived one that is renewed from the refresh token below when it expires);
/// - `STOREBACKUP_DROPBOX_REFRESH_TOKEN` and `STOREBACKUP_DROPBOX_APP_KEY`: written by
///   `storebackup auth dropbox`; short-lived access tokens are obtained from them.
struct DropboxCredentials: Sendable {
    static let tokenName = "STOREBACKUP_DROPBOX_TOKEN"
    static let refreshTokenName = "STOREBACKUP_DROPBOX_REFRESH_TOKEN"
    static let appKeyName = "STOREBACKUP_DROPBOX_APP_KEY"

    var accessToken: String?
    var refreshToken: String?
    var appKey: String?

    var canRefresh: Bool { refreshToken != nil && appKey != nil }

    static func load(options: DestinationOptions, url: String) throws -> DropboxCredentials {
        let credentials = DropboxCredentials(
            accessToken: try options.credential(tokenName),
            refreshToken: try options.credential(refreshTokenName),
            appKey: try options.credential(appKeyName))
        for (name, value) in [(tokenName, credentials.accessToken), (refreshTokenName, credentials.refreshToken)] {
            // Said without the value: a token must never reach a message.
            if let value, value.isEmpty || value.contains(where: { $0.isWhitespace || $0.isNewline || !$0.isASCII }) {
                throw StoreBackupError.invalidDestination(
                    url: url, reason: "\(name) is not a valid token (it contains spaces or other characters tokens never have)")
            }
        }
        if credentials.refreshToken != nil && credentials.appKey == nil {
            throw StoreBackupError.invalidDestination(
                url: url, reason: "\(refreshTokenName) is set but \(appKeyName) is not", remedy: .authorizeDropbox)
        }
        guard credentials.accessToken != nil || credentials.canRefresh else {
            throw StoreBackupError.invalidDestination(
                url: url,
                reason: "no Dropbox credentials: authorize the app once (that stores a refresh token "
                    + "in ~/.config/storebackup/credentials), or set \(tokenName) (environment or credentials file)",
                remedy: .authorizeDropbox)
        }
        return credentials
    }

    /// `text` with any of the secrets replaced, for showing server answers.
    func scrub(_ text: String) -> String {
        var result = text
        for secret in [accessToken, refreshToken].compactMap({ $0 }) where secret.count >= 8 {
            result = result.replacingOccurrences(of: secret, with: "[token]")
        }
        return result
    }
}

/// Hands out the current access token and renews it from the refresh token when Dropbox
/// says it expired. One renewal at a time: a caller holding a token that was already
/// replaced gets the new one without another round trip.
final class DropboxTokenSource: Sendable {
    let credentials: DropboxCredentials
    /// `{API}/oauth2/token`.
    let tokenURL: String
    let destination: String
    private let transport: RetryingTransport
    /// The token in use; renewed under this lock, so one renewal runs at a time.
    private let current: Mutex<String?>

    init(credentials: DropboxCredentials, tokenURL: String, destination: String, transport: RetryingTransport) {
        self.credentials = credentials
        self.tokenURL = tokenURL
        self.destination = destination
        self.transport = transport
        current = Mutex(credentials.accessToken)
    }

    /// The token to use now (obtained from the refresh token on first use if needed).
    func token(cancel: CancellationFlag?) throws -> String {
        try current.withLock { current in
            if let current { return current }
            let fresh = try requestAccessToken(cancel: cancel)
            current = fresh
            return fresh
        }
    }

    /// Replaces `stale` with a new token. Returns nil when no renewal is possible.
    func renew(replacing stale: String, cancel: CancellationFlag?) throws -> String? {
        guard credentials.canRefresh else { return nil }
        return try current.withLock { current in
            if let current, current != stale { return current }
            let fresh = try requestAccessToken(cancel: cancel)
            current = fresh
            return fresh
        }
    }

    /// `grant_type=refresh_token` at the token endpoint (PKCE apps need no app secret).
    private func requestAccessToken(cancel: CancellationFlag?) throws -> String {
        guard let refreshToken = credentials.refreshToken, let appKey = credentials.appKey else {
            throw StoreBackupError.destination(destination: destination, reason: "no Dropbox refresh token to renew the access token with")
        }
        let form = DropboxOAuthForm.encode([
            ("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", appKey),
        ])
        let response = try DropboxOAuthForm.post(form, to: tokenURL, transport: transport, destination: destination, cancel: cancel)
        guard response.status == 200 else {
            throw DropboxOAuthForm.error(response, destination: destination, credentials: credentials, whileRefreshing: true)
        }
        guard let token = DropboxAPI.object(response.body)?["access_token"] as? String, !token.isEmpty else {
            throw StoreBackupError.destination(
                destination: destination, reason: "Dropbox's token endpoint answered without an access token")
        }
        return token
    }
}

/// Form posts to Dropbox's OAuth token endpoint, shared by token renewal and `auth dropbox`.
enum DropboxOAuthForm {
    static func encode(_ fields: [(String, String)]) -> Data {
        Data(fields.map { URLPath.encodeComponent($0.0) + "=" + URLPath.encodeComponent($0.1) }.joined(separator: "&").utf8)
    }

    static func post(
        _ form: Data, to url: String, transport: RetryingTransport, destination: String,
        cancel: CancellationFlag?
    ) throws -> TransferResponse {
        var request = TransferRequest(method: "POST", url: url, label: "Dropbox token endpoint (\(destination))")
        request.headers.append(("Content-Type", "application/x-www-form-urlencoded"))
        request.body = .bytes(form)
        do {
            return try transport.perform(request, cancel: cancel)
        } catch StoreBackupError.transfer(let failure) {
            throw StoreBackupError.transfer(DropboxDestination.describe(failure, host: url, destination: destination))
        }
    }

    /// A clear message for a refused token request (`{"error", "error_description"}`).
    static func error(
        _ response: TransferResponse, destination: String, credentials: DropboxCredentials,
        whileRefreshing: Bool
    ) -> Error {
        let body = DropboxAPI.object(response.body)
        let code = body?["error"] as? String ?? ""
        let detail = credentials.scrub((body?["error_description"] as? String) ?? response.bodyText.prefix(200).description)
        if response.status == 429 || response.status >= 500 {
            return StoreBackupError.transferFailed(
                .http(status: response.status), label: destination,
                "Dropbox's token endpoint is unavailable (HTTP \(response.status))",
                retryAfter: RetryingTransport.retryAfter(response))
        }
        let reason: String
        var remedy: Remedy?
        switch (code, whileRefreshing) {
        case ("invalid_grant", true):
            reason = "Dropbox refused the stored refresh token (it was revoked, or the app's access was removed)"
            remedy = .authorizeDropbox
        case ("invalid_grant", false):
            reason = "Dropbox refused the authorization code (\(detail)); codes work once and expire after a few minutes"
            remedy = .authorizeDropbox
        case ("invalid_client", _):
            reason = "Dropbox does not know this app key (\(detail))"
            remedy = .checkDropboxAppKey
        default:
            reason =
                "Dropbox's token endpoint refused the request (HTTP \(response.status)\(code.isEmpty ? "" : " \(code)")\(detail.isEmpty ? "" : ": \(detail)"))"
        }
        return StoreBackupError.transferFailed(
            .http(status: response.status), label: destination, reason,
            serviceCode: code.isEmpty ? nil : code, remedy: remedy)
    }
}
