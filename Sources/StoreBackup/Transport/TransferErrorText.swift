/// Rewrites transport failures into messages that name the destination and say what to
/// do, shared by the HTTP destinations. The kind and libcurl code are kept, so retries
/// still apply; the hints follow the code, not libcurl's words: "cannot reach" only when
/// no connection was made, the `--ca-file` hint only when a certificate was rejected.
enum TransferErrorText {
    /// libcurl's own words from a transport error (without the request label).
    static func detail(_ error: TransferError) -> String {
        guard let range = error.message.range(of: ": ", options: .backwards) else { return error.message }
        return String(error.message[range.upperBound...])
    }

    /// `error` with a message for `destination` on `host` (HOST:PORT).
    static func rewrite(_ error: TransferError, destination: String, host: String) -> TransferError {
        var mapped = error
        let detail = detail(error)
        switch error.kind {
        case .connection where error.curlCode == 6 || error.curlCode == 7:   // resolve, connect
            mapped.message = "\(destination): cannot reach \(host) (\(detail)); check the host, the port and that the server is running"
        case .connection where error.curlCode == 35:   // CURLE_SSL_CONNECT_ERROR
            mapped.message = "\(destination): the TLS handshake with \(host) was interrupted (\(detail))"
        case .connection where error.curlCode != nil:
            mapped.message = "\(destination): the connection to \(host) broke (\(detail))"
        case .timeout:
            mapped.message = "\(destination): \(host) did not answer in time (\(detail))"
        case .tls:
            mapped.message = "\(destination): the TLS certificate of \(host) could not be verified (\(detail)); "
                + "if it is signed by your own certificate authority, pass that CA's PEM file with --ca-file (or STOREBACKUP_CA_FILE)"
        default:
            mapped.message = error.message.hasPrefix(destination) ? error.message : "\(destination): \(detail)"
        }
        return mapped
    }
}
