import CCurl

/// Decides what a libcurl failure means, from its result code alone (never from its
/// message text, which changes between libcurl versions and TLS/SSH backends).
///
/// The rule that matters most: a connection that breaks while it is being set up (TCP
/// reset, TLS handshake cut short, SSH banner or key exchange interrupted, as OpenSSH's
/// `MaxStartups` does under load) is transient and retried. Only an answer in which the
/// server or the local trust store actually *rejects* something (a certificate that does
/// not verify, a host key not in known_hosts, a key the server refuses) is permanent.
enum TransferClassifier {
    /// The kind of failure for libcurl result `code` on a request to `url`.
    static func kind(of code: CURLcode, url: String) -> TransferFailure.Kind {
        let sftp = url.hasPrefix("sftp://")
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT,
            CURLE_WEIRD_SERVER_REPLY, CURLE_PARTIAL_FILE, CURLE_SEND_ERROR, CURLE_RECV_ERROR,
            CURLE_GOT_NOTHING, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_READ_ERROR, CURLE_UPLOAD_FAILED,
            CURLE_SSH, CURLE_AGAIN:
            return .connection
        case CURLE_SSL_CONNECT_ERROR:
            // The TLS handshake did not complete (reset, EOF, garbage): the connection broke,
            // nothing was rejected. A certificate that fails verification is CURLE_PEER_FAILED_VERIFICATION.
            return .connection
        case CURLE_FAILED_INIT where sftp:
            // libcurl's SSH code reports a failed libssh2 session start-up (banner, key
            // exchange cut by a reset) as CURLE_FAILED_INIT.
            return .connection
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout
        case CURLE_PEER_FAILED_VERIFICATION:
            // On sftp:// libcurl reports a host key that is unknown or changed with this code.
            return sftp ? .hostKey : .tls
        case CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM, CURLE_SSL_ISSUER_ERROR,
            CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_CRL_BADFILE:
            return .tls
        case CURLE_LOGIN_DENIED:
            return .authentication
        case CURLE_REMOTE_FILE_NOT_FOUND:
            return .notFound
        default:
            return .other
        }
    }
}
