import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Backups in a folder on a WebDAV server (Apache mod_dav, nginx dav, Nextcloud, a NAS…).
///
/// `webdav://HOST[:PORT]/PATH` speaks HTTP, `webdavs://HOST[:PORT]/PATH` HTTPS. The user
/// and password come from `STOREBACKUP_WEBDAV_USER` and `STOREBACKUP_WEBDAV_PASSWORD`
/// (credentials file, environment, or `~/.config/storebackup/credentials`; see
/// `DestinationOptions`), sent with HTTP basic auth; a user may also be written in the URL
/// (`webdav://alice@host/…`), a password never.
///
/// Publishing is atomic: the archive is PUT under a hidden temporary name in the same
/// folder (`.storebackup-tmp-<pid>-<uuid>.zip`), then renamed with `MOVE` and
/// `Overwrite: F`, so the server itself refuses to replace an existing backup (412) and
/// `list` never shows a partial file. A failed upload deletes its temporary.
struct WebDAVDestination: BlockingDestination {
    let threadName = "storebackup-webdav"

    /// `http` or `https`.
    let httpScheme: String
    /// Host as written in URLs (IPv6 addresses in brackets).
    let host: String
    /// The port when the URL gave one.
    let port: Int?
    /// The folder's path segments, decoded ("my backups", not "my%20backups").
    let folder: [String]
    let user: String?
    let password: String?
    let transport: RetryingTransport
    /// One attempt per request: cleanup after a failure must not add a round of retries.
    let cleanupTransport: RetryingTransport
    /// Read each upload back and compare its SHA-256 before publishing it (on unless
    /// `STOREBACKUP_WEBDAV_READBACK=off`; the server's own checksum is used when it sends one).
    var readBack = true

    static let temporaryPrefix = ".storebackup-tmp-"
    static let propfindBody = """
        <?xml version="1.0" encoding="utf-8"?>
        <D:propfind xmlns:D="DAV:"><D:prop><D:getcontentlength/><D:getlastmodified/><D:resourcetype/></D:prop></D:propfind>
        """

    /// Validates `webdav://` / `webdavs://` URLs and reads the credentials.
    static func make(url: String, options: DestinationOptions) throws -> WebDAVDestination {
        guard let parts = RemoteURL(url) else {
            throw StoreBackupError.invalidDestination(
                url: RemoteURL.redacted(url), reason: "expected webdav://HOST[:PORT]/PATH or webdavs://HOST[:PORT]/PATH")
        }
        let httpScheme: String
        switch parts.scheme {
        case "webdav": httpScheme = "http"
        case "webdavs": httpScheme = "https"
        default:
            throw StoreBackupError.invalidDestination(url: parts.display, reason: "expected a webdav:// or webdavs:// URL")
        }
        if parts.hasPassword {
            throw StoreBackupError.invalidDestination(
                url: parts.display,
                reason: "do not put a password in the URL (it would show in process lists and shell history); "
                    + "set STOREBACKUP_WEBDAV_PASSWORD in the environment or a credentials file instead")
        }
        // A user written in the URL is the most specific choice; else the documented precedence.
        let user = try parts.user ?? options.credential("STOREBACKUP_WEBDAV_USER")
        let password = try options.credential("STOREBACKUP_WEBDAV_PASSWORD")
        if (user == nil) != (password == nil) {
            throw StoreBackupError.invalidDestination(
                url: parts.display,
                reason: user == nil
                    ? "a WebDAV password is set but no user: set STOREBACKUP_WEBDAV_USER"
                    : "no WebDAV password: set STOREBACKUP_WEBDAV_PASSWORD (environment or credentials file)")
        }
        let readBack =
            try options.credential("STOREBACKUP_WEBDAV_READBACK").map { !["off", "0", "no", "false"].contains($0.lowercased()) } ?? true
        return WebDAVDestination(
            httpScheme: httpScheme, host: parts.host, port: parts.port, folder: parts.segments,
            user: user, password: password,
            transport: RetryingTransport(options: options.transport, policy: options.retry, logger: options.logger),
            cleanupTransport: RetryingTransport(options: options.transport, policy: RetryPolicy(requestAttempts: 1, operationAttempts: 1)),
            readBack: readBack)
    }

    /// The URL as the user wrote it, without credentials.
    var displayName: String {
        let scheme = httpScheme == "https" ? "webdavs" : "webdav"
        return "\(scheme)://\(authority)/" + folder.joined(separator: "/")
    }

    private var authority: String { port.map { "\(host):\($0)" } ?? host }
    private var hostAndPort: String { "\(host):\(port ?? (httpScheme == "https" ? 443 : 80))" }

    /// Absolute URL of a folder (given as segments, ends in "/") on the server.
    private func url(folder segments: [String]) -> String {
        "\(httpScheme)://\(authority)/" + segments.map(URLPath.encodeComponent).map { $0 + "/" }.joined()
    }

    /// Absolute URL of a file in the backup folder.
    private func url(file name: String) -> String {
        url(folder: folder) + URLPath.encodeComponent(name)
    }

    private func request(_ method: String, _ url: String, label: String) -> TransferRequest {
        var request = TransferRequest(method: method, url: url, label: label)
        if let user, let password { request.credentials = .basic(user: user, password: password) }
        return request
    }

    // MARK: list

    func listBackups(cancel: CancellationFlag) throws -> [BackupListing] {
        guard let entries = try propfind(folder: folder, cancel: cancel) else { return [] }
        return entries.compactMap { entry in
            guard !entry.isCollection, BackupName.isBackup(entry.name) else { return nil }
            return BackupListing(
                name: entry.name, size: entry.size,
                date: BackupName.date(of: entry.name) ?? entry.modified ?? Date(timeIntervalSince1970: 0),
                modified: entry.modified)
        }
    }

    struct Entry: Equatable {
        var name: String
        var size: Int64
        var modified: Date?
        var isCollection: Bool
    }

    /// The folder's members (not the folder itself); nil when the folder does not exist.
    private func propfind(folder segments: [String], cancel: CancellationFlag?) throws -> [Entry]? {
        var propfind = request("PROPFIND", url(folder: segments), label: displayName)
        propfind.headers.append(("Depth", "1"))
        propfind.headers.append(("Content-Type", "application/xml; charset=utf-8"))
        propfind.body = .bytes(Data(Self.propfindBody.utf8))
        let response = try perform(propfind, cancel: cancel)
        if response.status == 404 { return nil }
        try check(response, expecting: [207], context: "list")
        return try Self.parseMultistatus(response.body, folderPath: "/" + segments.joined(separator: "/"))
    }

    /// Parses a PROPFIND `multistatus` answer. Only the properties of a propstat whose
    /// status is 200 count; the entry for the folder itself is left out.
    static func parseMultistatus(_ body: Data, folderPath: String) throws -> [Entry] {
        let root = try XMLElement.parse(body)
        guard root.name == "multistatus" else {
            throw StoreBackupError.transferFailed(.other, label: "", "the server's PROPFIND answer is not a WebDAV multistatus")
        }
        let folderSegments = folderPath.split(separator: "/").map(String.init)
        var entries: [Entry] = []
        for response in root.all("response") {
            guard let href = response.value("href") else { continue }
            let segments = hrefSegments(href)
            guard let name = segments.last, segments != folderSegments else { continue }
            var entry = Entry(name: name, size: 0, modified: nil, isCollection: href.hasSuffix("/"))
            for propstat in response.all("propstat") {
                let status = propstat.value("status") ?? ""
                guard status.split(separator: " ").dropFirst().first == "200", let prop = propstat.child("prop") else { continue }
                if let length = prop.value("getcontentlength"), let size = Int64(length) { entry.size = size }
                if let text = prop.value("getlastmodified") { entry.modified = HTTPDates.http(text) }
                if let type = prop.child("resourcetype") { entry.isCollection = type.child("collection") != nil }
            }
            entries.append(entry)
        }
        return entries
    }

    /// The decoded path segments of an href (a path or an absolute URL).
    static func hrefSegments(_ href: String) -> [String] {
        var path = Substring(href.trimmingCharacters(in: .whitespacesAndNewlines))
        if let schemeEnd = path.range(of: "://") {
            let afterScheme = path[schemeEnd.upperBound...]
            path = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? ""
        }
        return path.split(separator: "/").map { $0.removingPercentEncoding ?? String($0) }
    }

    // MARK: upload

    func upload(file: String, as name: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        let size = Int64(try FileSystem.lstatInfo(file).st_size)
        try makeCollections(folder, cancel: cancel)
        let temporary = Self.temporaryPrefix + "\(getpid())-\(UUID().uuidString).zip"
        let localHash = Hash(file: file, size: size)
        do {
            var put = request("PUT", url(file: temporary), label: "\(displayName)/\(name)")
            put.body = .file(path: file, offset: 0, length: size)
            put.headers.append(("Content-Type", "application/zip"))
            let response = try perform(put, cancel: cancel) { sent, _ in
                progress?(BackupProgress(phase: .uploading, bytesDone: sent, bytesTotal: size))
            }
            try check(response, expecting: [200, 201, 204], context: "upload \(name)")
            try cancel.throwIfCancelled()
            try verifyUpload(temporary, size: size, localHash: localHash, serverChecksum: response.header("oc-checksum"), cancel: cancel)
            try publish(temporary, as: name, size: size, localHash: localHash, cancel: cancel)
        } catch {
            // Best effort, and even when cancelled: never leave the temporary behind.
            _ = try? cleanupTransport.perform(request("DELETE", url(file: temporary), label: displayName), cancel: nil)
            throw error
        }
        progress?(BackupProgress(phase: .uploading, bytesDone: size, bytesTotal: size))
    }

    /// The local file's SHA-256, computed once and only when needed.
    final class Hash: Sendable {
        let file: String
        let size: Int64
        private let value = Locked<String?>(nil)
        init(file: String, size: Int64) { self.file = file; self.size = size }
        func get() throws -> String {
            if let value = value.current { return value }
            let computed = try FileDigest.sha256(file: file, length: size)
            value.withLock { $0 = computed }
            return computed
        }
    }

    /// Checks that the server holds exactly the local bytes under `remote`: its own
    /// checksum when it sends one (`OC-Checksum: SHA256:…`, Nextcloud/ownCloud), else a
    /// streamed read-back hashed on the fly (unless turned off). A mismatch removes nothing
    /// here (the caller deletes the temporary) and is worth another try.
    private func verifyUpload(_ remote: String, size: Int64, localHash: Hash, serverChecksum: String?, cancel: CancellationFlag) throws {
        if let serverChecksum, serverChecksum.uppercased().hasPrefix("SHA256:") {
            let theirs = serverChecksum.dropFirst(7).lowercased()
            guard theirs == (try localHash.get()) else { throw mismatch(remote, detail: "the server's checksum differs") }
            return
        }
        guard readBack else { return }
        guard try remoteHash(of: remote, cancel: cancel) == (try localHash.get()) else {
            throw mismatch(remote, detail: "reading it back gave other bytes")
        }
    }

    private func mismatch(_ remote: String, detail: String) -> StoreBackupError {
        .transferFailed(.transient, label: displayName, "the uploaded archive was damaged on the way (\(detail)); trying again")
    }

    /// SHA-256 of a remote file, streamed (nothing kept); nil when it does not exist.
    private func remoteHash(of remote: String, cancel: CancellationFlag?) throws -> String? {
        var get = request("GET", url(file: remote), label: "\(displayName)/\(remote)")
        get.sink = .sha256
        let response = try perform(get, cancel: cancel)
        if response.status == 404 { return nil }
        try check(response, expecting: [200], context: "read back \(remote)")
        return response.sha256
    }

    /// Renames the temporary to `name` with `MOVE` and `Overwrite: F`. When the outcome is
    /// unclear (the answer was lost, so a retried MOVE finds no source, 404, or a taken
    /// name, 412), the target is looked at: holding exactly our bytes, the backup is
    /// published (once); otherwise a taken name is `backupExists` and a missing one is retried.
    private func publish(_ temporary: String, as name: String, size: Int64, localHash: Hash, cancel: CancellationFlag) throws {
        var move = request("MOVE", url(file: temporary), label: "\(displayName)/\(name)")
        move.headers.append(("Destination", url(file: name)))
        move.headers.append(("Overwrite", "F"))
        let moved: TransferResponse
        do {
            moved = try perform(move, cancel: cancel)
        } catch StoreBackupError.transfer(let failure) where failure.isRetryable {
            if try holds(name, size: size, localHash: localHash, cancel: cancel) { return }
            throw StoreBackupError.transfer(failure)
        }
        if moved.status == 201 || moved.status == 204 { return }
        if moved.status == 404 || moved.status == 412 {
            if try holds(name, size: size, localHash: localHash, cancel: cancel) {
                _ = try? cleanupTransport.perform(request("DELETE", url(file: temporary), label: displayName), cancel: nil)
                return
            }
            if moved.status == 412 { throw StoreBackupError.backupExists(name: name, destination: displayName) }
            throw StoreBackupError.transferFailed(
                .transient, label: displayName, "publish \(name): the uploaded temporary vanished before its rename; trying again")
        }
        try check(moved, expecting: [201, 204], context: "publish \(name)")
    }

    /// Whether `name` exists with this size and these bytes (size from a HEAD, bytes by a read-back).
    private func holds(_ name: String, size: Int64, localHash: Hash, cancel: CancellationFlag) throws -> Bool {
        let response = try perform(request("HEAD", url(file: name), label: "\(displayName)/\(name)"), cancel: cancel)
        guard response.status == 200, response.header("content-length").flatMap({ Int64($0) }) == size else { return false }
        return try remoteHash(of: name, cancel: cancel) == (try localHash.get())
    }

    /// Creates the folder if needed, then puts and deletes an empty temporary: the server
    /// answers, the credentials are accepted, and the folder is writable.
    func preflight(cancel: CancellationFlag) throws {
        try makeCollections(folder, cancel: cancel)
        let probe = Self.temporaryPrefix + "\(getpid())-\(UUID().uuidString)-preflight"
        var put = request("PUT", url(file: probe), label: displayName)
        put.body = .bytes(Data())
        try check(try perform(put, cancel: cancel), expecting: [200, 201, 204], context: "write a test file")
        let deleted = try perform(request("DELETE", url(file: probe), label: displayName), cancel: cancel)
        try check(deleted, expecting: [200, 204, 404], context: "remove the test file")
    }

    /// Temporaries of uploads that never finished, older than `age` seconds.
    func staleUploads(olderThan age: Double, cancel: CancellationFlag) throws -> [StaleUpload] {
        let cutoff = Date().addingTimeInterval(-age)
        return (try propfind(folder: folder, cancel: cancel) ?? []).compactMap { entry in
            guard !entry.isCollection, entry.name.hasPrefix(Self.temporaryPrefix) else { return nil }
            if age > 0, let modified = entry.modified, modified > cutoff { return nil }
            return StaleUpload(name: entry.name, started: entry.modified)
        }
    }

    /// Deletes a stale temporary.
    func removeStaleUpload(_ upload: StaleUpload, cancel: CancellationFlag) throws {
        guard upload.name.hasPrefix(Self.temporaryPrefix), !upload.name.contains("/") else { return }
        let response = try perform(request("DELETE", url(file: upload.name), label: displayName), cancel: cancel)
        try check(response, expecting: [200, 204, 404], context: "remove \(upload.name)")
    }

    /// Creates `segments` and any missing parent (MKCOL from the deepest level up until
    /// one exists, then back down). 405 means the folder is already there.
    private func makeCollections(_ segments: [String], cancel: CancellationFlag?) throws {
        guard !segments.isEmpty else { return }
        let label = "\(httpScheme)://\(authority)/" + segments.joined(separator: "/")
        var response = try perform(request("MKCOL", url(folder: segments), label: label), cancel: cancel)
        if response.status == 409 {
            // A parent is missing: create it, then try again.
            try makeCollections(Array(segments.dropLast()), cancel: cancel)
            response = try perform(request("MKCOL", url(folder: segments), label: label), cancel: cancel)
        }
        if response.status == 405 || response.status == 201 || response.status == 200 || response.status == 204 { return }
        if response.status == 409 || response.status == 404 {
            throw StoreBackupError.transferFailed(
                .http(status: response.status), label: displayName,
                "cannot create the folder /\(segments.joined(separator: "/")) on the server "
                    + "(HTTP \(response.status)); check the path in the URL")
        }
        try check(response, expecting: [201], context: "create folder /\(segments.joined(separator: "/"))")
    }

    // MARK: download and delete

    func download(_ name: String, to file: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        var get = request("GET", url(file: name), label: "\(displayName)/\(name)")
        get.sink = .file(path: file, offset: 0)
        // A file left by an earlier attempt: continue it with a Range request.
        get = RetryingTransport.resumed(get)
        let start: Int64 = if case .file(_, let offset) = get.sink { offset } else { 0 }
        var response = try perform(get, cancel: cancel) { _, received in
            progress?(BackupProgress(phase: .downloading, bytesDone: start + received, bytesTotal: 0))
        }
        if response.status == 416 && start > 0 {
            // Nothing left after what is already here. Apache sends no Content-Range
            // with its 416, so ask for the size when the answer does not say.
            let total = try ContentRange.completeLength(of: response) ?? remoteSize(of: name, cancel: cancel)
            if total == start { return }
            // The partial file does not belong to this backup: start over.
            get.headers.removeAll { $0.0.lowercased() == "range" }
            get.sink = .file(path: file, offset: 0)
            response = try perform(get, cancel: cancel) { _, received in
                progress?(BackupProgress(phase: .downloading, bytesDone: received, bytesTotal: 0))
            }
        }
        if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
        try check(response, expecting: [200, 206], context: "download \(name)")
    }

    /// A ranged GET of the file (see ``RangedRead``).
    func rangeReader(of name: String, size: Int64) -> BackupRangeReader? {
        guard (try? BackupName.validate(name)) != nil else { return nil }
        return BackupRangeReader(size: size) { range, target, cancel in
            let label = "\(displayName)/\(name)"
            let get = try RangedRead.request(request("GET", url(file: name), label: label), range: range, size: size, into: target)
            let response = try RangedRead.perform(get) { try perform($0, cancel: cancel) }
            if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
            try check(response, expecting: [200, 206], context: "read \(name)")
            return try RangedRead.bytes(of: response, range: range, size: size, label: label, target: target)
        }
    }

    /// A file's size from a HEAD request (nil when the server does not say).
    private func remoteSize(of name: String, cancel: CancellationFlag?) throws -> Int64? {
        let response = try perform(request("HEAD", url(file: name), label: "\(displayName)/\(name)"), cancel: cancel)
        if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
        try check(response, expecting: [200], context: "look up \(name)")
        return response.header("content-length").flatMap { Int64($0) }
    }

    func delete(_ name: String, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        let response = try perform(request("DELETE", url(file: name), label: "\(displayName)/\(name)"), cancel: cancel)
        if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
        try check(response, expecting: [200, 204], context: "delete \(name)")
    }

    // MARK: errors

    /// Performs a request, turning transport failures into messages that name the
    /// destination and say what to do. The error kind is kept, so retries still apply.
    private func perform(
        _ request: TransferRequest, cancel: CancellationFlag?,
        progress: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws -> TransferResponse {
        do {
            return try transport.perform(request, cancel: cancel, progress: progress)
        } catch StoreBackupError.transfer(let failure) {
            throw StoreBackupError.transfer(TransferErrorText.rewrite(failure, destination: displayName, host: hostAndPort))
        }
    }

    /// Turns a non-success answer into an error a user can act on (never showing secrets).
    func check(_ response: TransferResponse, expecting statuses: Set<Int>, context: String) throws {
        guard !statuses.contains(response.status) else { return }
        let reason: String
        switch response.status {
        case 401:
            reason =
                user == nil
                ? "\(context): the server asks for a user and password (HTTP 401); set STOREBACKUP_WEBDAV_USER and STOREBACKUP_WEBDAV_PASSWORD"
                : "\(context): wrong user or password (HTTP 401); check STOREBACKUP_WEBDAV_USER and STOREBACKUP_WEBDAV_PASSWORD"
        case 403:
            reason = "\(context): access denied (HTTP 403); the user may not use /\(folder.joined(separator: "/"))"
        case 404:
            reason = "\(context): the folder /\(folder.joined(separator: "/")) does not exist on the server (HTTP 404)"
        case 405:
            reason = "\(context): the server does not allow this here (HTTP 405); is WebDAV enabled for /\(folder.joined(separator: "/"))?"
        case 507:
            reason = "\(context): the server is out of space (HTTP 507)"
        default:
            let text = Self.summary(response)
            reason = "\(context): HTTP \(response.status)\(text.isEmpty ? "" : ": \(text)")"
        }
        throw StoreBackupError.transferFailed(
            .http(status: response.status), label: displayName, reason,
            retryAfter: RetryingTransport.retryAfter(response))
    }

    /// A short, one-line hint from an error body (HTML tags and whitespace removed).
    private static func summary(_ response: TransferResponse) -> String {
        var text = response.bodyText.replacingOccurrences(of: "<[^>]*>", with: " ", options: .regularExpression)
        text = text.split(whereSeparator: { $0.isWhitespace }).joined(separator: " ")
        return String(text.prefix(200))
    }
}
