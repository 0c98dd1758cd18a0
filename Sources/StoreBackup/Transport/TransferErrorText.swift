/// Rewrites transport failures into messages that name the destination and say what to
/// do, shared by the HTTP destinations. The kind and libcurl code are kept, so retries
/// still apply; the words follow the code, not libcurl's text: "cannot reach" only when
/// no connection was made, the certificate-authority remedy only when a certificate was rejected.
enum TransferErrorText {
    /// `failure` with a message for `destination` on `host` (HOST:PORT).
    static func rewrite(_ failure: TransferFailure, destination: String, host: String) -> TransferFailure {
        var mapped = failure
        let detail = failure.detail
        switch failure.kind {
        case .connection where failure.curlCode == 6 || failure.curlCode == 7:  // resolve, connect
            mapped.message = "\(destination): cannot reach \(host) (\(detail)); check the host, the port and that the server is running"
        case .connection where failure.curlCode == 35:  // CURLE_SSL_CONNECT_ERROR
            mapped.message = "\(destination): the TLS handshake with \(host) was interrupted (\(detail))"
        case .connection where failure.curlCode != nil:
            mapped.message = "\(destination): the connection to \(host) broke (\(detail))"
        case .timeout:
            mapped.message = "\(destination): \(host) did not answer in time (\(detail))"
        case .tls:
            mapped.message = "\(destination): the TLS certificate of \(host) could not be verified (\(detail))"
            mapped.remedy = .trustCertificateAuthority
        default:
            mapped.message = failure.message.hasPrefix(destination) ? failure.message : "\(destination): \(detail)"
        }
        return mapped
    }
}
