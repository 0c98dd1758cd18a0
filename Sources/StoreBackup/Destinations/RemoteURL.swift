import Foundation

/// The parts of a `scheme://[user[:password]@]host[:port][/path]` URL, parsed by hand so
/// that unencoded spaces in paths are accepted and nothing is silently normalised.
struct RemoteURL {
    var scheme: String
    var user: String?
    var hasPassword: Bool
    /// As written in URLs: IPv6 addresses keep their brackets.
    var host: String
    var port: Int?
    /// Decoded path segments, empty ones dropped.
    var segments: [String]
    /// Whether a path was given at all (even just "/").
    var hasPath: Bool

    init?(_ text: String) {
        guard let schemeEnd = text.range(of: "://") else { return nil }
        scheme = text[..<schemeEnd.lowerBound].lowercased()
        let rest = text[schemeEnd.upperBound...]
        guard !rest.contains("?"), !rest.contains("#"), !rest.contains(where: { $0.isNewline || $0 == "\0" }) else { return nil }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        var authority = rest[..<slash]
        let path = rest[slash...]
        hasPath = !path.isEmpty
        if let at = authority.lastIndex(of: "@") {
            let info = authority[..<at]
            let name = info.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)[0]
            user = name.isEmpty ? nil : (name.removingPercentEncoding ?? String(name))
            hasPassword = info.contains(":")
            authority = authority[authority.index(after: at)...]
        } else {
            user = nil
            hasPassword = false
        }
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[...close])
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            portText = authority[authority.index(after: colon)...]
        } else {
            host = String(authority)
        }
        guard !host.isEmpty, host != "[]", !host.contains(where: { $0.isWhitespace }) else { return nil }
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else { return nil }
            port = value
        } else {
            port = nil
        }
        segments = path.split(separator: "/").map { $0.removingPercentEncoding ?? String($0) }
        guard !segments.contains(where: { $0 == "." || $0 == ".." || $0.contains("/") || $0.contains("\0") }) else { return nil }
    }

    /// The URL without password, for messages.
    var display: String {
        "\(scheme)://\(user.map { $0 + "@" } ?? "")\(host)\(port.map { ":\($0)" } ?? "")/" + segments.joined(separator: "/")
    }

    /// `text` with any password replaced, for messages about URLs that did not parse.
    static func redacted(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://") else { return text }
        let rest = text[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return text }
        let info = rest[..<at]
        guard let colon = info.firstIndex(of: ":") else { return text }
        return String(text[..<colon]) + ":***" + String(text[at...])
    }

    /// `text` with everything before the host's `@` replaced by `***`, for URLs whose user
    /// part is itself a secret (an access key pair).
    static func withoutUserInfo(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://") else { return text }
        let rest = text[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return text }
        return String(text[..<schemeEnd.upperBound]) + "***" + String(text[at...])
    }
}
