import Foundation

/// Backups in a folder of a Dropbox account, over Dropbox's HTTP API v2.
///
/// `dropbox:///PATH` names a folder inside the app folder or the whole Dropbox, whichever
/// the app's permission gives; `dropbox:///` is the top. Credentials: see
/// `DropboxCredentials` (`storebackup auth dropbox`, or `STOREBACKUP_DROPBOX_TOKEN`).
/// `STOREBACKUP_DROPBOX_API_URL` and `STOREBACKUP_DROPBOX_CONTENT_URL` point at other
/// hosts (tests use an emulator); they must be https, and certificates are verified.
///
/// Small archives go up in one `/2/files/upload`; larger ones through an upload session
/// (`start`, `append_v2`, `finish`) in chunks streamed from the file. Either way the
/// commit uses mode `add` without autorename, so an existing backup is never replaced,
/// and the content hash Dropbox reports is compared with one computed here.
struct DropboxDestination: BlockingDestination {
    let threadName = "storebackup-dropbox"

    /// The folder's path segments, decoded.
    let folder: [String]
    let apiURL: String
    let contentURL: String
    let tokens: DropboxTokenSource
    let transport: RetryingTransport
    /// Bytes per upload-session request, and the size above which a session is used.
    /// Dropbox wants multiples of 4 MiB; tests lower it to exercise several chunks.
    var chunkSize: Int64 = 8 << 20

    static let defaultAPIURL = "https://api.dropboxapi.com"
    static let defaultContentURL = "https://content.dropboxapi.com"
    /// Offset corrections one upload accepts before giving up (each one is a server
    /// telling us it has a different amount of data than we think).
    static let maximumOffsetCorrections = 20

    static func make(url: String, options: DestinationOptions) throws -> DropboxDestination {
        let folder = try parse(url)
        let environment = options.environment
        let apiURL = try host(environment["STOREBACKUP_DROPBOX_API_URL"], default: defaultAPIURL, name: "STOREBACKUP_DROPBOX_API_URL")
        let contentURL = try host(
            environment["STOREBACKUP_DROPBOX_CONTENT_URL"], default: defaultContentURL, name: "STOREBACKUP_DROPBOX_CONTENT_URL")
        let display = displayName(of: folder)
        let credentials = try DropboxCredentials.load(options: options, url: display)
        let transport = RetryingTransport(options: options.transport, policy: options.retry, logger: options.logger)
        return DropboxDestination(
            folder: folder, apiURL: apiURL, contentURL: contentURL,
            tokens: DropboxTokenSource(
                credentials: credentials, tokenURL: apiURL + "/oauth2/token", destination: display, transport: transport),
            transport: transport)
    }

    /// The folder of `dropbox:///PATH`: three slashes, since the URL has no host.
    static func parse(_ url: String) throws -> [String] {
        let prefix = "dropbox://"
        guard url.lowercased().hasPrefix(prefix) else {
            throw StoreBackupError.invalidDestination(url: url, reason: "expected dropbox:///PATH")
        }
        let rest = url.dropFirst(prefix.count)
        guard rest.hasPrefix("/") else {
            throw StoreBackupError.invalidDestination(
                url: url,
                reason:
                    "expected dropbox:///PATH, with three slashes (the path is inside your Dropbox or the app's folder), e.g. dropbox:///Backups"
            )
        }
        guard !rest.contains("?"), !rest.contains("#"), !rest.contains(where: { $0.isNewline || $0 == "\0" }) else {
            throw StoreBackupError.invalidDestination(url: url, reason: "a Dropbox path cannot contain ?, # or control characters")
        }
        let segments = rest.split(separator: "/").map { $0.removingPercentEncoding ?? String($0) }
        guard !segments.contains(where: { $0 == "." || $0 == ".." || $0.contains("/") || $0.contains("\0") }) else {
            throw StoreBackupError.invalidDestination(url: url, reason: "a Dropbox path cannot contain . or .. segments")
        }
        return segments
    }

    static func host(_ value: String?, default fallback: String, name: String) throws -> String {
        var text = value.flatMap { $0.isEmpty ? nil : $0 } ?? fallback
        while text.hasSuffix("/") { text.removeLast() }
        guard text.lowercased().hasPrefix("https://") else {
            throw StoreBackupError.invalidDestination(
                url: text, reason: "\(name) must be an https:// URL (tokens are never sent unencrypted)")
        }
        return text
    }

    static func displayName(of folder: [String]) -> String { "dropbox:///" + folder.joined(separator: "/") }

    var displayName: String { Self.displayName(of: folder) }

    /// Dropbox's spelling of the folder: "" for the top, else "/A/B".
    var folderPath: String { folder.isEmpty ? "" : "/" + folder.joined(separator: "/") }
    func path(of name: String) -> String { folderPath + "/" + name }

    // MARK: list

    func listBackups(cancel: CancellationFlag) throws -> [BackupListing] {
        // A cursor Dropbox declares stale (`reset`) means starting the listing over.
        for _ in 1...3 {
            if let listings = try listOnce(cancel: cancel) { return listings }
        }
        throw StoreBackupError.destination(destination: displayName, reason: "the listing kept being reset by Dropbox; try again later")
    }

    /// Every page of one listing; nil when Dropbox reset the cursor on the way.
    private func listOnce(cancel: CancellationFlag) throws -> [BackupListing]? {
        var listings: [BackupListing] = []
        var response = try rpc(
            "files/list_folder", ["path": folderPath, "recursive": false, "limit": 2000],
            label: displayName, cancel: cancel)
        // No folder yet: nothing was ever backed up here.
        if response.status == 409, DropboxRouteError(response.body)?.has("not_found") == true { return [] }
        while true {
            try check(response, context: "list")
            guard let page = DropboxAPI.object(response.body), let entries = page["entries"] as? [[String: Any]] else {
                throw StoreBackupError.destination(destination: displayName, reason: "Dropbox's listing could not be read")
            }
            for entry in entries where entry[".tag"] as? String == "file" {
                guard let name = entry["name"] as? String, BackupName.isBackup(name) else { continue }
                let modified = (entry["server_modified"] as? String).flatMap(HTTPDates.iso8601)
                listings.append(
                    BackupListing(
                        name: name, size: DropboxAPI.int64(entry["size"]) ?? 0,
                        date: BackupName.date(of: name) ?? modified ?? Date(timeIntervalSince1970: 0), modified: modified))
            }
            guard page["has_more"] as? Bool == true, let cursor = page["cursor"] as? String else { return listings }
            response = try rpc("files/list_folder/continue", ["cursor": cursor], label: displayName, cancel: cancel)
            if response.status == 409, DropboxRouteError(response.body)?.has("reset") == true { return nil }
        }
    }

    // MARK: upload

    /// No temporary name is needed: a file appears in Dropbox only when `/upload`
    /// completes or `upload_session/finish` commits, whole, and mode `add` without
    /// autorename makes that commit fail rather than replace an existing backup.
    func upload(file: String, as name: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        let size = Int64(try FileSystem.lstatInfo(file).st_size)
        try createFolder(cancel: cancel)
        let result =
            size <= chunkSize
            ? try uploadWhole(file: file, size: size, name: name, cancel: cancel, progress: progress)
            : try DropboxUploadSession(destination: self, file: file, size: size, name: name, cancel: cancel, progress: progress).run()
        let remoteHash = DropboxAPI.object(result.metadata)?["content_hash"] as? String
        guard remoteHash == result.localHash else {
            // Never leave a backup whose bytes differ from the archive we made.
            _ = try? rpc("files/delete_v2", ["path": path(of: name)], label: displayName, cancel: nil)
            throw StoreBackupError.transferFailed(
                .transient, label: displayName,
                "the uploaded \"\(name)\" does not match the local archive (Dropbox content hash "
                    + "\(remoteHash ?? "missing"), expected \(result.localHash)); the upload was removed, trying again")
        }
        progress?(BackupProgress(phase: .uploading, bytesDone: size, bytesTotal: size))
    }

    /// What a committed upload returned, and the hash the file should have.
    struct Committed {
        var metadata: Data
        var localHash: String
    }

    /// Creates the backup folder when missing (or lists the root): Dropbox answers, the
    /// token is accepted, and the app may write there, before `create` starts archiving.
    func preflight(cancel: CancellationFlag) throws {
        if folder.isEmpty {
            _ = try listBackups(cancel: cancel)
            return
        }
        try createFolder(cancel: cancel)
    }

    /// Creates the backup folder ("the client folder") if it is not there yet.
    private func createFolder(cancel: CancellationFlag) throws {
        guard !folder.isEmpty else { return }
        let response = try rpc("files/create_folder_v2", ["path": folderPath, "autorename": false], label: displayName, cancel: cancel)
        if response.status == 409, let error = DropboxRouteError(response.body), error.has("conflict") {
            if error.has("folder") { return }
            throw StoreBackupError.destination(destination: displayName, reason: "\(folderPath) exists in Dropbox but is not a folder")
        }
        try check(response, context: "create the folder \(folderPath)")
    }

    /// One `/2/files/upload`, with the content hash, so Dropbox itself refuses bytes that
    /// were damaged on the way.
    private func uploadWhole(
        file: String, size: Int64, name: String, cancel: CancellationFlag,
        progress: ProgressHandler?
    ) throws -> Committed {
        let hash = try DropboxContentHasher.hash(file: file, length: size)
        let argument: [String: Any] = ["path": path(of: name), "mode": "add", "autorename": false, "mute": true, "content_hash": hash]
        let response = try content(
            "files/upload", argument, body: .file(path: file, offset: 0, length: size),
            label: "\(displayName)/\(name)", cancel: cancel
        ) { sent, _ in
            progress?(BackupProgress(phase: .uploading, bytesDone: min(sent, size), bytesTotal: size))
        }
        if let earlier = try committedEarlier(response, name: name, localHash: hash, cancel: cancel) { return earlier }
        try checkCommit(response, name: name, context: "upload \(name)")
        return Committed(metadata: response.body, localHash: hash)
    }

    /// A commit refused because the name is taken, by a file with exactly our content:
    /// an earlier try whose answer was lost. That commit counts (once); nil otherwise.
    func committedEarlier(_ response: TransferResponse, name: String, localHash: String, cancel: CancellationFlag) throws -> Committed? {
        guard response.status == 409, DropboxRouteError(response.body)?.has("conflict") == true,
            let existing = try metadata(of: name, cancel: cancel), existing["content_hash"] as? String == localHash
        else { return nil }
        return Committed(metadata: try JSONSerialization.data(withJSONObject: existing), localHash: localHash)
    }

    /// Maps the errors of a commit (`upload` or `upload_session/finish`) that mean
    /// something particular for a backup, then the rest like any answer.
    func checkCommit(_ response: TransferResponse, name: String, context: String) throws {
        if response.status == 409, let error = DropboxRouteError(response.body) {
            if error.has("conflict") { throw StoreBackupError.backupExists(name: name, destination: displayName) }
            if error.has("content_hash_mismatch") {
                // Damaged on the way: the whole upload is tried again (bounded, with backoff).
                throw StoreBackupError.transferFailed(
                    .transient, label: displayName,
                    "\(context): Dropbox received different bytes than were sent (content_hash_mismatch)",
                    serviceCode: error.code)
            }
        }
        try check(response, context: context)
    }

    /// The metadata of `name`, or nil when there is no such file.
    func metadata(of name: String, cancel: CancellationFlag?) throws -> [String: Any]? {
        let response = try rpc("files/get_metadata", ["path": path(of: name)], label: "\(displayName)/\(name)", cancel: cancel)
        if response.status == 409, DropboxRouteError(response.body)?.has("not_found") == true { return nil }
        try check(response, context: "look up \(name)")
        return DropboxAPI.object(response.body)
    }

    // MARK: download and delete

    /// `/2/files/download` into `file`; a partial file left by an earlier attempt is
    /// continued with a `Range` request.
    func download(_ name: String, to file: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        let label = "\(displayName)/\(name)"
        let argument = DropboxAPI.json(["path": path(of: name)])
        let response = try send(
            label: label, cancel: cancel,
            progress: { _, received in
                progress?(BackupProgress(phase: .downloading, bytesDone: received, bytesTotal: 0))
            }
        ) { token in
            var request = TransferRequest(method: "POST", url: contentURL + "/2/files/download", label: label)
            request.credentials = .bearer(token: token)
            request.headers.append(("Dropbox-API-Arg", argument))
            // An empty value removes libcurl's default form Content-Type: downloads have no body.
            request.headers.append(("Content-Type", ""))
            request.sink = .file(path: file, offset: 0)
            return RetryingTransport.resumed(request)
        }
        if response.status == 409, DropboxRouteError(response.body)?.has("not_found") == true {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
        if response.status == 416, let total = ContentRange.completeLength(of: response),
            (try? FileSystem.lstatInfo(file).st_size).map(Int64.init) == total
        {
            return  // an earlier attempt already got every byte
        }
        if response.status == 206 { return }  // the rest of a partial file
        try check(response, context: "download \(name)")
    }

    /// `/2/files/download` with a `Range` header, which Dropbox honours (see ``RangedRead``).
    func rangeReader(of name: String, size: Int64) -> BackupRangeReader? {
        guard (try? BackupName.validate(name)) != nil else { return nil }
        return BackupRangeReader(size: size) { range, target, cancel in
            let label = "\(displayName)/\(name)"
            var download = TransferRequest(method: "POST", url: contentURL + "/2/files/download", label: label)
            download.headers.append(("Dropbox-API-Arg", DropboxAPI.json(["path": path(of: name)])))
            download.headers.append(("Content-Type", ""))
            let ranged = try RangedRead.request(download, range: range, size: size, into: target)
            let response = try RangedRead.perform(ranged) { request in
                try send(label: label, cancel: cancel) { token in
                    var request = request
                    request.credentials = .bearer(token: token)
                    return request
                }
            }
            if response.status == 409, DropboxRouteError(response.body)?.has("not_found") == true {
                throw StoreBackupError.backupNotFound(name: name, destination: displayName)
            }
            if response.status != 206 { try check(response, context: "read \(name)") }
            return try RangedRead.bytes(of: response, range: range, size: size, label: label, target: target)
        }
    }

    func delete(_ name: String, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        let response = try rpc("files/delete_v2", ["path": path(of: name)], label: "\(displayName)/\(name)", cancel: cancel)
        if response.status == 409, DropboxRouteError(response.body)?.has("not_found") == true {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
        try check(response, context: "delete \(name)")
    }

    // MARK: requests

    /// An RPC route on the API host: JSON in the body, JSON back.
    func rpc(_ route: String, _ argument: [String: Any], label: String, cancel: CancellationFlag?) throws -> TransferResponse {
        let body = Data(DropboxAPI.json(argument).utf8)
        return try send(label: label, cancel: cancel) { token in
            var request = TransferRequest(method: "POST", url: apiURL + "/2/" + route, label: label)
            request.credentials = .bearer(token: token)
            request.headers.append(("Content-Type", "application/json"))
            request.body = .bytes(body)
            return request
        }
    }

    /// An upload route on the content host: the argument in `Dropbox-API-Arg`, the data
    /// streamed from the file.
    func content(
        _ route: String, _ argument: [String: Any], body: TransferRequest.Body, label: String,
        cancel: CancellationFlag?, progress: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws -> TransferResponse {
        let header = DropboxAPI.json(argument)
        return try send(label: label, cancel: cancel, progress: progress) { token in
            var request = TransferRequest(method: "POST", url: contentURL + "/2/" + route, label: label)
            request.credentials = .bearer(token: token)
            request.headers.append(("Dropbox-API-Arg", header))
            request.headers.append(("Content-Type", "application/octet-stream"))
            request.body = body
            return request
        }
    }

    /// Performs a request with the current access token; when Dropbox answers 401 and the
    /// token can be renewed, renews it and tries once more. Network failures, 429 and 5xx
    /// were already retried by the transport; what is left is reported clearly.
    private func send(
        label: String, cancel: CancellationFlag?, progress: (@Sendable (Int64, Int64) -> Void)? = nil,
        _ make: (String) -> TransferRequest
    ) throws -> TransferResponse {
        var token = try tokens.token(cancel: cancel)
        var response = try perform(Self.retryingBusyAnswers(make(token)), cancel: cancel, progress: progress)
        if response.status == 401, let renewed = try tokens.renew(replacing: token, cancel: cancel) {
            token = renewed
            response = try perform(Self.retryingBusyAnswers(make(token)), cancel: cancel, progress: progress)
        }
        if response.status == 401 { throw authenticationError(response) }
        return response
    }

    /// `request`, with Dropbox's documented "try again later" answer besides 429/5xx:
    /// 409 `too_many_write_operations` (another write to the same namespace was under way;
    /// nothing was written), retried by the transport from the operation's budget.
    static func retryingBusyAnswers(_ request: TransferRequest) -> TransferRequest {
        var request = request
        request.isTransientAnswer = { response in
            response.status == 409 && DropboxRouteError(response.body)?.has("too_many_write_operations") == true
        }
        return request
    }

    private func perform(
        _ request: TransferRequest, cancel: CancellationFlag?,
        progress: (@Sendable (Int64, Int64) -> Void)?
    ) throws -> TransferResponse {
        do {
            return try transport.perform(request, cancel: cancel, progress: progress)
        } catch StoreBackupError.transfer(let failure) {
            throw StoreBackupError.transfer(Self.describe(failure, host: request.url, destination: displayName))
        }
    }

    // MARK: errors

    /// A transport failure in words that name the destination and say what to do.
    static func describe(_ failure: TransferFailure, host url: String, destination: String) -> TransferFailure {
        let host = URL(string: url).map { "\($0.host ?? "")\($0.port.map { ":\($0)" } ?? "")" } ?? url
        let detail = failure.detail
        var described = failure
        switch failure.kind {
        case .connection:
            described.message = "\(destination): cannot reach Dropbox at \(host) (\(detail)); check the network connection"
        case .timeout:
            described.message = "\(destination): Dropbox at \(host) did not answer in time (\(detail))"
        case .tls:
            described.message = "\(destination): the TLS certificate of \(host) could not be verified (\(detail))"
            described.remedy = .trustCertificateAuthority
        default:
            described.message = "\(destination): \(detail)"
        }
        return described
    }

    private func authenticationError(_ response: TransferResponse) -> Error {
        let error = DropboxRouteError(response.body)
        let renewable = tokens.credentials.canRefresh
        let reason: String
        // What to do is the remedy (authorize the app again); a front end says how.
        if error?.has("expired_access_token") == true {
            reason =
                renewable
                ? "Dropbox says the access token expired, even after renewing it"
                : "the Dropbox access token has expired (expired_access_token); set a new STOREBACKUP_DROPBOX_TOKEN, "
                    + "or authorize the app once so tokens are renewed automatically"
        } else if error?.has("invalid_access_token") == true {
            reason =
                renewable
                ? "Dropbox rejected the access token (invalid_access_token) even after renewing it"
                : "Dropbox rejected the access token (invalid_access_token); check STOREBACKUP_DROPBOX_TOKEN"
        } else {
            let summary = error?.summary ?? tokens.credentials.scrub(response.bodyText.prefix(200).description)
            reason = "Dropbox refused the credentials (HTTP 401\(summary.isEmpty ? "" : ": \(summary)"))"
        }
        return StoreBackupError.transferFailed(
            .http(status: 401), label: displayName, reason, serviceCode: error?.code,
            remedy: .authorizeDropbox)
    }

    /// Turns an answer that is not 200 into an error a user can act on (never showing secrets).
    func check(_ response: TransferResponse, context: String) throws {
        guard response.status != 200 else { return }
        let scrubbed = tokens.credentials.scrub(response.bodyText)
        switch response.status {
        case 409:
            let error = DropboxRouteError(response.body)
            if error?.has("too_many_write_operations") == true {
                // Another write to the same namespace was in progress: heals after a pause.
                throw StoreBackupError.transferFailed(
                    .transient, label: displayName,
                    "\(context): Dropbox is busy with other writes (too_many_write_operations)",
                    serviceCode: error?.code, retryAfter: RetryingTransport.retryAfter(response))
            }
            if error?.has("content_hash_mismatch") == true {
                throw StoreBackupError.transferFailed(
                    .transient, label: displayName,
                    "\(context): Dropbox received different bytes than were sent (content_hash_mismatch)",
                    serviceCode: error?.code)
            }
            let reason: String
            if error?.has("insufficient_space") == true {
                reason = "\(context): the Dropbox account is out of space (insufficient_space); free some space or delete old backups"
            } else if let error, error.has("not_found") {
                reason = "\(context): not found in Dropbox (\(error.summary))"
            } else {
                reason = "\(context): Dropbox refused (\(error?.summary ?? scrubbed.prefix(200).description))"
            }
            throw StoreBackupError.transferFailed(.http(status: 409), label: displayName, reason, serviceCode: error?.code)
        case 400:
            // Dropbox explains bad input in plain text.
            let text = scrubbed.split(whereSeparator: \.isNewline).joined(separator: " ").prefix(300)
            throw StoreBackupError.transferFailed(
                .http(status: 400), label: displayName, "\(context): Dropbox rejected the request (HTTP 400): \(text)")
        case 403:
            let error = DropboxRouteError(response.body)
            let summary = error?.summary ?? scrubbed.prefix(200).description
            throw StoreBackupError.transferFailed(
                .http(status: 403), label: displayName,
                "\(context): the Dropbox app may not do this (HTTP 403: \(summary)); check the app's permissions",
                serviceCode: error?.code)
        default:
            let error = DropboxRouteError(response.body)
            let summary = error?.summary ?? scrubbed.prefix(200).description
            throw StoreBackupError.transferFailed(
                .http(status: response.status), label: displayName,
                "\(context): Dropbox answered HTTP \(response.status)\(summary.isEmpty ? "" : ": \(summary)")",
                serviceCode: error?.code, retryAfter: RetryingTransport.retryAfter(response))
        }
    }
}
