import Crypto
import Foundation

/// Connecting storebackup to a Dropbox account once, with OAuth 2's authorization-code
/// flow and PKCE (RFC 7636), the flow Dropbox recommends for apps that cannot keep a
/// secret: no app secret is needed or stored.
///
/// 1. `authorizeURL` is opened by the user, who allows the app and gets a code;
/// 2. `complete(code:…)` exchanges the code (with the verifier only this process knows)
///    for a refresh token and stores it with the app key in a credentials file (0600).
///
/// Later commands get short-lived access tokens from that refresh token by themselves.
public struct DropboxAuthorization: Sendable {
    /// Dropbox's own authorization page, used unless `STOREBACKUP_DROPBOX_AUTHORIZE_URL`
    /// names another.
    public static let defaultAuthorizeURL = "https://www.dropbox.com/oauth2/authorize"

    /// The key of the user's Dropbox app (from the Dropbox App Console); not a secret, it is
    /// stored beside the refresh token.
    public let appKey: String
    /// 64 random characters from the unreserved set (RFC 7636 allows 43 to 128).
    let codeVerifier: String
    /// base64url(SHA-256(verifier)), without padding.
    public let codeChallenge: String

    /// Starts connecting the app `appKey`, with a fresh random verifier: call
    /// ``authorizeURL(environment:)`` and ``complete(code:credentialsFile:options:)`` on this
    /// same value, since no other can complete it. Throws `invalidDestination` when `appKey` is
    /// not letters, digits, `-` and `_`.
    public init(appKey: String) throws {
        guard !appKey.isEmpty, appKey.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            throw StoreBackupError.invalidDestination(
                url: "dropbox",
                reason: "\"\(appKey)\" is not a Dropbox app key (letters and digits, from the app's page in the Dropbox App Console)")
        }
        self.appKey = appKey
        codeVerifier = Self.makeVerifier()
        codeChallenge = Self.challenge(for: codeVerifier)
    }

    static func makeVerifier() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        // SystemRandomNumberGenerator is the operating system's CSPRNG (getrandom on Linux).
        var generator = SystemRandomNumberGenerator()
        return String((0..<64).map { _ in alphabet[Int(generator.next(upperBound: UInt32(alphabet.count)))] })
    }

    static func challenge(for verifier: String) -> String {
        Data(SHA256.hash(data: Data(verifier.utf8))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The page the user opens; `STOREBACKUP_DROPBOX_AUTHORIZE_URL` replaces Dropbox's
    /// (tests point it at an emulator). `token_access_type=offline` asks for a refresh token.
    public func authorizeURL(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let base = environment["STOREBACKUP_DROPBOX_AUTHORIZE_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? Self.defaultAuthorizeURL
        let query = [
            ("client_id", appKey), ("response_type", "code"), ("code_challenge", codeChallenge),
            ("code_challenge_method", "S256"), ("token_access_type", "offline"),
        ].map { "\($0.0)=\(URLPath.encodeComponent($0.1))" }.joined(separator: "&")
        return base + (base.contains("?") ? "&" : "?") + query
    }

    /// Exchanges `code` at `{API}/oauth2/token` and stores the refresh token and app key
    /// in `credentialsFile`. Nothing secret is returned or printed.
    public func complete(code: String, credentialsFile: String, options: DestinationOptions) async throws {
        let code = code.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !code.isEmpty, !code.contains(where: { $0.isWhitespace }) else {
            throw StoreBackupError.destination(
                destination: "Dropbox", reason: "no authorization code was given; paste the code Dropbox showed after allowing access")
        }
        let apiURL = try DropboxDestination.host(
            options.environment["STOREBACKUP_DROPBOX_API_URL"],
            default: DropboxDestination.defaultAPIURL, name: "STOREBACKUP_DROPBOX_API_URL")
        let transport = RetryingTransport(options: options.transport, policy: options.retry, logger: options.logger)
        let form = DropboxOAuthForm.encode([
            ("grant_type", "authorization_code"), ("code", code), ("client_id", appKey), ("code_verifier", codeVerifier),
        ])
        let refreshToken: String = try await runBlocking(name: "storebackup-dropbox-auth") { cancel in
            let response = try DropboxOAuthForm.post(
                form, to: apiURL + "/oauth2/token", transport: transport, destination: "Dropbox", cancel: cancel)
            guard response.status == 200 else {
                throw DropboxOAuthForm.error(response, destination: "Dropbox", credentials: DropboxCredentials(), whileRefreshing: false)
            }
            guard let token = DropboxAPI.object(response.body)?["refresh_token"] as? String, !token.isEmpty else {
                throw StoreBackupError.destination(
                    destination: "Dropbox",
                    reason: "Dropbox returned no refresh token (was token_access_type=offline dropped from the link?)")
            }
            return token
        }
        try CredentialsFile.update(
            credentialsFile,
            values: [
                (DropboxCredentials.refreshTokenName, refreshToken), (DropboxCredentials.appKeyName, appKey),
            ])
    }
}
