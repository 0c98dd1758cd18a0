import Crypto
import Foundation

/// Backups in an S3 bucket or any S3-compatible service (MinIO, Ceph, R2, rclone…).
///
/// `s3://BUCKET/PREFIX`. Requests are signed with AWS Signature V4 by libcurl
/// (CURLOPT_AWS_SIGV4) from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN` and `AWS_REGION`; `--s3-endpoint` / `AWS_ENDPOINT_URL` points at
/// another service, addressed path-style. Large archives go up as a multipart upload,
/// parts streamed from the file by a few threads (memory stays small); a failed upload is
/// aborted, and an object only exists, and so is only listed, once it is complete.
struct S3Destination: BlockingDestination {
    let threadName = "storebackup-s3"

    /// The bucket, from `s3://BUCKET/PREFIX`.
    let bucket: String
    /// The key prefix (a "folder"), without slashes at either end; may be empty.
    let prefix: String
    let endpoint: String
    let region: String
    let accessKey: String
    let secretKey: String
    let sessionToken: String?
    let transport: RetryingTransport
    /// Lock each new backup (``ObjectLockRetention``); nil: no lock.
    var objectLock: ObjectLockRetention? = nil

    /// Objects above this size use a multipart upload.
    static let multipartThreshold: Int64 = 32 << 20
    static let minimumPartSize: Int64 = 16 << 20
    static let maximumParts: Int64 = 10_000
    static let partConcurrency = 4

    /// Parses `s3://BUCKET/PREFIX` and reads the credentials and region as ``DestinationOptions`` describes.
    static func make(url: String, options: DestinationOptions) throws -> S3Destination {
        // Parsed by hand, not by URLComponents: its host runs through IDNA, which loads ICU's
        // data (megabytes of the program's pages on every scheduled run); a bucket is ASCII.
        guard let parts = RemoteURL(url), parts.scheme == "s3", parts.user == nil, !parts.hasPassword,
            parts.port == nil, !parts.host.hasPrefix("["), parts.host.allSatisfy({ $0.isASCII && $0 != "%" })
        else {
            throw StoreBackupError.invalidDestination(url: RemoteURL.withoutUserInfo(url), reason: "expected s3://BUCKET/PREFIX")
        }
        let bucket = parts.host
        guard let accessKey = try options.credential("AWS_ACCESS_KEY_ID"),
            let secretKey = try options.credential("AWS_SECRET_ACCESS_KEY")
        else {
            throw StoreBackupError.invalidDestination(
                url: url, reason: "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (environment or credentials file)")
        }
        let region = try options.credential("AWS_REGION") ?? (try options.credential("AWS_DEFAULT_REGION")) ?? "us-east-1"
        var endpoint = try options.s3Endpoint ?? (try options.credential("AWS_ENDPOINT_URL")) ?? "https://s3.\(region).amazonaws.com"
        while endpoint.hasSuffix("/") { endpoint.removeLast() }
        guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://") else {
            throw StoreBackupError.invalidDestination(url: endpoint, reason: "the S3 endpoint must be an http:// or https:// URL")
        }
        let prefix = parts.segments.joined(separator: "/")
        return S3Destination(
            bucket: bucket, prefix: prefix, endpoint: endpoint, region: region, accessKey: accessKey,
            secretKey: secretKey, sessionToken: try options.credential("AWS_SESSION_TOKEN"),
            transport: RetryingTransport(options: options.transport, policy: options.retry, logger: options.logger),
            objectLock: options.objectLock)
    }

    var displayName: String { "s3://\(bucket)" + (prefix.isEmpty ? "" : "/\(prefix)") }

    func key(_ name: String) -> String { prefix.isEmpty ? name : prefix + "/" + name }

    /// Path-style URL; `query` must already be in canonical order (libcurl signs it as written).
    func url(key: String? = nil, query: [(String, String)] = []) -> String {
        var text = endpoint + "/" + URLPath.encodeComponent(bucket)
        if let key { text += "/" + URLPath.encode(key) }
        if !query.isEmpty {
            text +=
                "?"
                + query.sorted { $0.0 < $1.0 }
                .map { URLPath.encodeComponent($0.0) + "=" + URLPath.encodeComponent($0.1) }
                .joined(separator: "&")
        }
        return text
    }

    func request(_ method: String, _ url: String, label: String) -> TransferRequest {
        var request = TransferRequest(method: method, url: url, label: label)
        request.credentials = .awsSigV4(accessKey: accessKey, secretKey: secretKey, region: region, service: "s3")
        request.headers.append(("x-amz-content-sha256", "UNSIGNED-PAYLOAD"))
        if let sessionToken { request.headers.append(("x-amz-security-token", sessionToken)) }
        return request
    }

    // MARK: list

    func listBackups(cancel: CancellationFlag) throws -> [BackupListing] {
        var listings: [BackupListing] = []
        var token: String?
        let listPrefix = prefix.isEmpty ? "" : prefix + "/"
        repeat {
            var query = [("list-type", "2"), ("prefix", listPrefix), ("delimiter", "/")]
            if let token { query.append(("continuation-token", token)) }
            let response = try perform(request("GET", url(query: query), label: displayName), cancel: cancel)
            try check(response, expecting: [200], context: "list")
            let root = try XMLElement.parse(response.body)
            for object in root.all("Contents") {
                guard let key = object.value("Key"), key.hasPrefix(listPrefix) else { continue }
                let name = String(key.dropFirst(listPrefix.count))
                guard BackupName.isBackup(name), !name.contains("/") else { continue }
                let modified = object.value("LastModified").flatMap(HTTPDates.iso8601)
                listings.append(
                    BackupListing(
                        name: name, size: Int64(object.value("Size") ?? "") ?? 0,
                        date: BackupName.date(of: name) ?? modified ?? Date(timeIntervalSince1970: 0), modified: modified))
            }
            token = root.value("IsTruncated") == "true" ? root.value("NextContinuationToken") : nil
        } while token != nil
        return listings
    }

    // MARK: upload

    func upload(file: String, as name: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try upload(file: file, as: name, progress: progress, cancel: cancel, nameChosenFree: false)
    }

    /// The server checks each upload's `Content-MD5` (see ``putWhole(file:size:name:ifAbsent:cancel:progress:)``).
    var checksUploadedBytes: Bool { true }

    /// Two requests for a point: a HEAD of its base, then its PUT, made conditional
    /// (`If-None-Match: *`) instead of preceded by a HEAD of its own name.
    func publishPoint(file: String, as name: String, onto base: BackupListing, progress: ProgressHandler?) async throws {
        try await runBlocking(name: threadName + "-upload") { cancel in
            let found = try head(key: key(base.name), cancel: cancel).map {
                BackupListing(name: base.name, size: $0.size, date: base.date, modified: nil)
            }
            try PointBase.require(base, found: found, at: displayName)
            try upload(file: file, as: name, progress: progress, cancel: cancel, nameChosenFree: true)
        }
    }

    /// `nameChosenFree`: the caller chose `name` against what it knows of the destination, so
    /// a single PUT goes without a HEAD of the name first, conditional on there being no such
    /// object. A server that honours the condition (S3, moto) never overwrites; one that
    /// ignores it (rclone) could only overwrite an object another writer gave the very same
    /// name in the meantime.
    private func upload(file: String, as name: String, progress: ProgressHandler?, cancel: CancellationFlag, nameChosenFree: Bool)
        throws
    {
        try BackupName.validate(name)
        let size = Int64(try FileSystem.lstatInfo(file).st_size)
        if nameChosenFree && size <= Self.multipartThreshold {
            if try putWhole(file: file, size: size, name: name, ifAbsent: true, cancel: cancel, progress: progress) { return }
            // The name was taken: by an earlier attempt whose answer was lost, or by another writer.
            if let existing = try head(key: key(name), cancel: cancel),
                try existing.matches(file: file, size: size, partSize: partSize(for: size))
            {
                return
            }
            throw StoreBackupError.backupExists(name: name, destination: displayName)
        }
        if let existing = try head(key: key(name), cancel: cancel) {
            // An earlier attempt whose answer was lost may have published exactly this file.
            if try existing.matches(file: file, size: size, partSize: partSize(for: size)) { return }
            throw StoreBackupError.backupExists(name: name, destination: displayName)
        }
        if size <= Self.multipartThreshold {
            _ = try putWhole(file: file, size: size, name: name, ifAbsent: false, cancel: cancel, progress: progress)
        } else {
            try MultipartUpload(destination: self, key: key(name), file: file, size: size, cancel: cancel, progress: progress).run()
        }
    }

    /// One PUT with `Content-MD5`, which the server checks (a flipped byte is refused with
    /// 400 BadDigest and sent again); the returned ETag is compared too where it is an MD5.
    /// `ifAbsent`: only where no object has the name (`If-None-Match: *`); returns false when
    /// the server refused because one has (412).
    private func putWhole(
        file: String, size: Int64, name: String, ifAbsent: Bool, cancel: CancellationFlag, progress: ProgressHandler?
    ) throws -> Bool {
        let digest = try FileDigest.md5(file: file, length: size)
        var put = request("PUT", url(key: key(name)), label: "\(displayName)/\(name)")
        put.body = .file(path: file, offset: 0, length: size)
        put.headers.append(("Content-MD5", FileDigest.base64(digest)))
        if ifAbsent { put.headers.append(("If-None-Match", "*")) }
        put.headers += objectLock?.headers() ?? []
        put.isTransientAnswer = { Self.isBadDigest($0) }
        let response = try perform(put, cancel: cancel) { sent, _ in
            progress?(BackupProgress(phase: .uploading, bytesDone: sent, bytesTotal: size))
        }
        if Self.isBadDigest(response) {
            throw StoreBackupError.transferFailed(
                .transient, label: displayName, "upload \(name): the server kept receiving different bytes")
        }
        if ifAbsent && response.status == 412 { return false }
        try check(response, expecting: [200], context: "upload \(name)")
        // Where the ETag is an MD5, it must be this file's: else remove it and try again.
        if let etag = Self.md5ETag(response.header("etag")), etag != FileDigest.hex(digest) {
            _ = try? perform(request("DELETE", url(key: key(name)), label: displayName), cancel: nil)
            throw StoreBackupError.transferFailed(
                .transient, label: displayName, "upload \(name): the server stored different bytes (ETag \(etag)); trying again")
        }
        return true
    }

    /// The server refused a body whose `Content-MD5` did not match: it was damaged on the way.
    static func isBadDigest(_ response: TransferResponse) -> Bool {
        guard response.status == 400 else { return false }
        let code = (try? XMLElement.parse(response.body))?.value("Code")
        return code == "BadDigest" || code == "InvalidDigest" || code == "XAmzContentChecksumMismatch"
    }

    /// An ETag without quotes, when it has the form of an MD5 (32 hex digits).
    static func md5ETag(_ value: String?) -> String? {
        guard let value else { return nil }
        let bare = value.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
        return bare.count == 32 && bare.allSatisfy(\.isHexDigit) ? bare : nil
    }

    /// What a HEAD says about an object.
    struct ObjectInfo {
        var size: Int64
        var etag: String?
        /// The version a HEAD without a version id found, on a versioned bucket.
        var versionID: String? = nil
        /// Object Lock: the retain-until date, and whether a legal hold is on.
        var retainUntil: Date? = nil
        var retainMode: ObjectLockRetention.Mode? = nil
        var legalHold = false

        /// Whether Object Lock forbids deleting this version now.
        func isLocked(now: Date = Date()) -> Bool {
            legalHold || (retainUntil.map { $0 > now } ?? false)
        }

        /// Whether this object holds exactly `file`: the same size and an ETag that is the
        /// MD5 of the file (single PUT) or of its parts' MD5s (multipart, `HEX-N`).
        /// An ETag of another form (e.g. server-side encryption) proves nothing: no match.
        func matches(file: String, size expected: Int64, partSize: Int64) throws -> Bool {
            guard size == expected, let etag = etag?.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased() else {
                return false
            }
            if let md5 = S3Destination.md5ETag(etag) { return md5 == FileDigest.hex(try FileDigest.md5(file: file, length: size)) }
            return etag == (try S3Destination.multipartETag(file: file, size: size, partSize: partSize))
        }
    }

    /// The ETag S3 gives a multipart object: MD5 of the parts' binary MD5s, "-", the part count.
    static func multipartETag(file: String, size: Int64, partSize: Int64) throws -> String {
        var digests: [Insecure.MD5.Digest] = []
        var offset: Int64 = 0
        while offset < size {
            let length = min(partSize, size - offset)
            digests.append(try FileDigest.md5(file: file, offset: offset, length: length))
            offset += length
        }
        return multipartETag(partDigests: digests)
    }

    static func multipartETag<Digest: Sequence<UInt8>>(partDigests: [Digest]) -> String {
        var hasher = Insecure.MD5()
        for digest in partDigests { hasher.update(data: Data(digest)) }
        return FileDigest.hex(hasher.finalize()) + "-\(partDigests.count)"
    }

    /// Parts of at least 16 MiB, larger when needed to stay under 10,000 parts.
    func partSize(for size: Int64) -> Int64 {
        let needed = (size + Self.maximumParts - 1) / Self.maximumParts
        let mebibyte: Int64 = 1 << 20
        return max(Self.minimumPartSize, (needed + mebibyte - 1) / mebibyte * mebibyte)
    }

    func exists(key: String, cancel: CancellationFlag?) throws -> Bool {
        try head(key: key, cancel: cancel) != nil
    }

    /// Size and ETag of an object, or nil when there is none.
    func head(key: String, cancel: CancellationFlag?) throws -> ObjectInfo? {
        let response = try perform(request("HEAD", url(key: key), label: displayName), cancel: cancel)
        if response.status == 404 { return nil }
        try check(response, expecting: [200], context: "look up \(key)")
        let version = response.header("x-amz-version-id").flatMap { $0.isEmpty || $0 == "null" ? nil : $0 }
        return ObjectInfo(
            size: response.header("content-length").flatMap { Int64($0) } ?? -1, etag: response.header("etag"),
            versionID: version,
            retainUntil: response.header("x-amz-object-lock-retain-until-date").flatMap(HTTPDates.iso8601),
            retainMode: response.header("x-amz-object-lock-mode").flatMap(ObjectLockRetention.Mode.init(text:)),
            legalHold: response.header("x-amz-object-lock-legal-hold")?.uppercased() == "ON")
    }

    /// One multipart upload: create, parts in parallel from the file, complete; abort on failure.
    /// Every part carries `Content-MD5` (checked by the server); a complete whose answer was
    /// lost is recognised by the object it left (size and multipart ETag).
    struct MultipartUpload {
        let destination: S3Destination
        let key: String
        let file: String
        let size: Int64
        let cancel: CancellationFlag
        let progress: ProgressHandler?

        var partSize: Int64 { destination.partSize(for: size) }

        func run() throws {
            let label = "\(destination.displayName)/\(key)"
            var create = destination.request("POST", destination.url(key: key, query: [("uploads", "")]), label: label)
            // The lock is set when the upload starts; every part then carries its Content-MD5, as Object Lock requires.
            create.headers += destination.objectLock?.headers() ?? []
            let created = try destination.perform(create, cancel: cancel)
            try destination.check(created, expecting: [200], context: "start upload")
            guard let uploadID = try XMLElement.parse(created.body).value("UploadId") else {
                throw StoreBackupError.destination(destination: destination.displayName, reason: "the server did not return an upload id")
            }
            do {
                let parts = try uploadParts(uploadID: uploadID, label: label)
                try complete(uploadID: uploadID, parts: parts, label: label)
            } catch {
                abort(uploadID: uploadID, label: label)
                throw error
            }
            if let lock = destination.objectLock { try ensureLocked(lock, label: label) }
        }

        /// Some servers (moto) drop the lock headers of CreateMultipartUpload: where the
        /// completed object shows no lock, it is set with PutObjectRetention, so a backup
        /// said to be locked is locked.
        private func ensureLocked(_ lock: ObjectLockRetention, label: String) throws {
            guard let info = try destination.head(key: key, cancel: cancel), info.retainUntil == nil else { return }
            try destination.putRetention(
                BackupRetention(mode: lock.mode, until: lock.retainUntil()), key: key, version: info.versionID, cancel: cancel)
        }

        private func uploadParts(uploadID: String, label: String) throws -> [(etag: String, digest: Data)] {
            let count = Int((size + partSize - 1) / partSize)
            let sent = ByteCounter()
            return try WorkerPool.map(
                Array(1...count), name: "storebackup-s3-part", width: S3Destination.partConcurrency,
                cancel: cancel
            ) { number in
                let offset = Int64(number - 1) * partSize
                let length = min(partSize, size - offset)
                let part = try uploadPart(number, offset: offset, length: length, uploadID: uploadID, label: label)
                let done = sent.add(length)
                progress?(BackupProgress(phase: .uploading, bytesDone: done, bytesTotal: size))
                return (etag: part.0, digest: Data(part.1))
            }
        }

        /// One part with its `Content-MD5`; sent again when the server saw other bytes.
        private func uploadPart(
            _ number: Int, offset: Int64, length: Int64, uploadID: String,
            label: String
        ) throws -> (String, Insecure.MD5.Digest) {
            let digest = try FileDigest.md5(file: file, offset: offset, length: length)
            var put = destination.request(
                "PUT", destination.url(key: key, query: [("partNumber", "\(number)"), ("uploadId", uploadID)]),
                label: "\(label) part \(number)")
            put.body = .file(path: file, offset: offset, length: length)
            put.headers.append(("Content-MD5", FileDigest.base64(digest)))
            let expected = FileDigest.hex(digest)
            // Sent again (from the operation's retry budget) while the server saw other bytes.
            let badDigest: @Sendable (TransferResponse) -> Bool = { response in
                S3Destination.isBadDigest(response)
                    || (response.status == 200 && S3Destination.md5ETag(response.header("etag")).map { $0 != expected } == true)
            }
            put.isTransientAnswer = badDigest
            let response = try destination.perform(put, cancel: cancel)
            if badDigest(response) {
                throw StoreBackupError.transferFailed(
                    .transient, label: "\(label) part \(number)", "the server kept receiving different bytes")
            }
            try destination.check(response, expecting: [200], context: "upload part \(number)")
            guard let etag = response.header("etag") else {
                throw StoreBackupError.destination(destination: destination.displayName, reason: "part \(number) has no ETag")
            }
            return (etag, digest)
        }

        private func complete(uploadID: String, parts: [(etag: String, digest: Data)], label: String) throws {
            var xml = "<CompleteMultipartUpload>"
            for (index, part) in parts.enumerated() {
                xml += "<Part><PartNumber>\(index + 1)</PartNumber><ETag>\(part.etag)</ETag></Part>"
            }
            xml += "</CompleteMultipartUpload>"
            let expectedETag = S3Destination.multipartETag(partDigests: parts.map(\.digest))
            var post = destination.request("POST", destination.url(key: key, query: [("uploadId", uploadID)]), label: label)
            post.body = .bytes(Data(xml.utf8))
            post.headers.append(("Content-Type", "application/xml"))
            post.headers.append(("Content-MD5", FileDigest.base64(Insecure.MD5.hash(data: Data(xml.utf8)))))
            let response: TransferResponse
            do {
                response = try destination.perform(post, cancel: cancel)
            } catch StoreBackupError.transfer(let failure) where failure.isRetryable {
                // Outcome unknown (the answer was lost, retries gave up): look before failing.
                if try published(expectedETag: expectedETag) { return }
                throw StoreBackupError.transfer(failure)
            }
            if response.status == 404, try published(expectedETag: expectedETag) {
                // NoSuchUpload: an earlier try of this request completed it and its answer was lost.
                return
            }
            try destination.check(response, expecting: [200], context: "complete upload")
            // S3 may answer 200 and still report an error in the body.
            let root = try? XMLElement.parse(response.body)
            if let root, root.name == "Error" {
                throw StoreBackupError.transferFailed(
                    .other, label: destination.displayName,
                    "completing the upload failed: \(root.value("Message") ?? root.value("Code") ?? "unknown")",
                    serviceCode: root.value("Code"))
            }
            // Where the server reports the object's ETag in the S3 form, it must be ours.
            if let reported = root?.value("ETag")?.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased(),
                reported.hasSuffix("-\(parts.count)"), reported != expectedETag
            {
                _ = try? destination.perform(destination.request("DELETE", destination.url(key: key), label: label), cancel: nil)
                throw StoreBackupError.transferFailed(
                    .transient, label: label, "the completed object has ETag \(reported), expected \(expectedETag); trying again")
            }
        }

        /// Whether the object now exists with this upload's size and (where the server
        /// reports one in the S3 form) its multipart ETag.
        private func published(expectedETag: String) throws -> Bool {
            guard let info = try destination.head(key: key, cancel: cancel), info.size == size else { return false }
            guard let etag = info.etag?.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased(),
                etag.contains("-")
            else { return true }
            return etag == expectedETag
        }

        private func abort(uploadID: String, label: String) {
            let request = destination.request("DELETE", destination.url(key: key, query: [("uploadId", uploadID)]), label: label)
            _ = try? destination.transport.perform(request, cancel: nil)
        }
    }

    /// Multipart uploads under the prefix started more than `age` seconds ago and never
    /// completed or aborted (their abort failed too, or the process died).
    func staleUploads(olderThan age: Double, cancel: CancellationFlag) throws -> [StaleUpload] {
        let listPrefix = prefix.isEmpty ? "" : prefix + "/"
        let cutoff = Date().addingTimeInterval(-age)
        var found: [StaleUpload] = []
        var markers: [(String, String)] = []
        repeat {
            let response = try perform(
                request("GET", url(query: [("prefix", listPrefix), ("uploads", "")] + markers), label: displayName), cancel: cancel)
            // Some servers (rclone's) answer 404 NoSuchUpload when there are none, and
            // some do not implement the listing (501): either way there is nothing to clean.
            if response.status == 501 { return found }
            if response.status == 404, (try? XMLElement.parse(response.body))?.value("Code") == "NoSuchUpload" { return found }
            try check(response, expecting: [200], context: "list uploads")
            let root = try XMLElement.parse(response.body)
            for upload in root.all("Upload") {
                guard let key = upload.value("Key"), key.hasPrefix(listPrefix) else { continue }
                let started = upload.value("Initiated").flatMap(HTTPDates.iso8601)
                if age > 0, let started, started > cutoff { continue }
                found.append(
                    StaleUpload(name: String(key.dropFirst(listPrefix.count)), started: started, identifier: upload.value("UploadId")))
            }
            markers = []
            if root.value("IsTruncated") == "true", let key = root.value("NextKeyMarker") {
                markers = [("key-marker", key), ("upload-id-marker", root.value("NextUploadIdMarker") ?? "")]
            }
        } while !markers.isEmpty
        return found
    }

    /// Aborts an incomplete multipart upload (its parts are freed).
    func removeStaleUpload(_ upload: StaleUpload, cancel: CancellationFlag) throws {
        guard let uploadID = upload.identifier else { return }
        let response = try perform(
            request("DELETE", url(key: key(upload.name), query: [("uploadId", uploadID)]), label: displayName),
            cancel: cancel)
        if response.status == 404 { return }  // gone meanwhile
        try check(response, expecting: [200, 204], context: "abort upload of \(upload.name)")
    }

    /// One list request of at most one key: the endpoint answers, the credentials and the
    /// bucket are accepted.
    func preflight(cancel: CancellationFlag) throws {
        let listPrefix = prefix.isEmpty ? "" : prefix + "/"
        let response = try perform(
            request("GET", url(query: [("list-type", "2"), ("max-keys", "1"), ("prefix", listPrefix)]), label: displayName), cancel: cancel)
        try check(response, expecting: [200], context: "check the bucket")
        if objectLock != nil { try checkObjectLockEnabled(cancel: cancel) }
    }

    /// `--retain-days` needs a bucket created with Object Lock (GET ?object-lock says
    /// `Enabled`); otherwise the PUTs would fail, or worse, succeed unlocked on a server
    /// that ignores the headers. Checked before anything is archived.
    func checkObjectLockEnabled(cancel: CancellationFlag?) throws {
        let response = try perform(request("GET", url(query: [("object-lock", "")]), label: displayName), cancel: cancel)
        let root = try? XMLElement.parse(response.body)
        if response.status == 200, root?.value("ObjectLockEnabled") == "Enabled" { return }
        if response.status == 200 || response.status == 404 || response.status == 501
            || root?.value("Code") == "ObjectLockConfigurationNotFoundError" || root?.value("Code") == "NotImplemented"
        {
            throw StoreBackupError.invalidDestination(
                url: displayName,
                reason: "bucket \"\(bucket)\" does not have S3 Object Lock enabled, so --retain-days cannot lock backups there; "
                    + "use a bucket created with Object Lock (x-amz-bucket-object-lock-enabled: true), or drop --retain-days")
        }
        try check(response, expecting: [200], context: "check Object Lock")
    }

    // MARK: Object Lock of existing backups

    func retention(of name: String) async throws -> BackupRetention? {
        try await runBlocking(name: threadName + "-retention") { try retention(of: name, cancel: $0) }
    }

    func extendRetention(of name: String, to retention: BackupRetention) async throws -> Bool {
        try await runBlocking(name: threadName + "-retention") { try extendRetention(of: name, to: retention, cancel: $0) }
    }

    /// Read from a HEAD's `x-amz-object-lock-*` headers (moto does not answer GetObjectRetention).
    func retention(of name: String, cancel: CancellationFlag) throws -> BackupRetention? {
        try BackupName.validate(name)
        guard let info = try head(key: key(name), cancel: cancel) else {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
        guard let until = info.retainUntil else { return nil }
        return BackupRetention(mode: info.retainMode ?? .governance, until: until)
    }

    func extendRetention(of name: String, to retention: BackupRetention, cancel: CancellationFlag) throws -> Bool {
        try BackupName.validate(name)
        guard let info = try head(key: key(name), cancel: cancel) else {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
        if let until = info.retainUntil, until >= retention.until { return false }
        let mode = info.retainUntil == nil ? retention.mode : (info.retainMode ?? retention.mode)
        try putRetention(BackupRetention(mode: mode, until: retention.until), key: key(name), version: info.versionID, cancel: cancel)
        return true
    }

    /// PutObjectRetention on one version of `key`, with the Content-MD5 Object Lock requires.
    func putRetention(_ retention: BackupRetention, key: String, version: String?, cancel: CancellationFlag?) throws {
        let body = Data(retention.requestBody.utf8)
        var query = [("retention", "")]
        if let version { query.append(("versionId", version)) }
        var put = request("PUT", url(key: key, query: query), label: "\(displayName)/\(key)")
        put.body = .bytes(body)
        put.headers.append(("Content-Type", "application/xml"))
        put.headers.append(("Content-MD5", FileDigest.base64(Insecure.MD5.hash(data: body))))
        let response = try perform(put, cancel: cancel)
        try check(response, expecting: [200, 204], context: "lock \(key)")
    }

    // MARK: download and delete

    func download(_ name: String, to file: String, progress: ProgressHandler?, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        var get = request("GET", url(key: key(name)), label: "\(displayName)/\(name)")
        get.sink = .file(path: file, offset: 0)
        get = RetryingTransport.resumed(get)
        let response = try perform(get, cancel: cancel) { _, received in
            progress?(BackupProgress(phase: .downloading, bytesDone: received, bytesTotal: 0))
        }
        if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
        try check(response, expecting: [200, 206], context: "download \(name)")
    }

    /// A ranged GET of the object (see ``RangedRead``).
    func rangeReader(of name: String, size: Int64) -> BackupRangeReader? {
        guard (try? BackupName.validate(name)) != nil else { return nil }
        return BackupRangeReader(size: size) { range, target, cancel in
            let label = "\(displayName)/\(name)"
            let get = try RangedRead.request(request("GET", url(key: key(name)), label: label), range: range, size: size, into: target)
            let response = try RangedRead.perform(get) { try perform($0, cancel: cancel) }
            if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
            try check(response, expecting: [200, 206], context: "read \(name)")
            return try RangedRead.bytes(of: response, range: range, size: size, label: label, target: target)
        }
    }

    func delete(_ name: String, cancel: CancellationFlag) throws {
        try BackupName.validate(name)
        // S3 answers 204 for a missing key too; look first so an unknown name is an error.
        guard let info = try head(key: key(name), cancel: cancel) else {
            throw StoreBackupError.backupNotFound(name: name, destination: displayName)
        }
        if info.isLocked() { throw StoreBackupError.backupLocked(name: name, destination: displayName, until: info.retainUntil) }
        // On a versioned bucket (Object Lock implies one) a DELETE without a version id
        // only hides the object behind a delete marker while its bytes stay: delete the
        // version itself, so a backup gone from `list` is really gone.
        let query = info.versionID.map { [("versionId", $0)] } ?? []
        let response = try perform(request("DELETE", url(key: key(name), query: query), label: displayName), cancel: cancel)
        if response.status == 403, objectLock != nil || info.versionID != nil,
            (try? XMLElement.parse(response.body))?.value("Code") == "AccessDenied"
        {
            // A lock the HEAD did not show (no permission to read retention, say).
            throw StoreBackupError.backupLocked(name: name, destination: displayName, until: info.retainUntil)
        }
        try check(response, expecting: [200, 204], context: "delete \(name)")
    }

    // MARK: errors

    /// Performs a request; transport failures get a message naming the destination.
    func perform(
        _ request: TransferRequest, cancel: CancellationFlag?,
        progress: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws -> TransferResponse {
        do {
            return try transport.perform(request, cancel: cancel, progress: progress)
        } catch StoreBackupError.transfer(let failure) {
            let host = URL(string: endpoint).map { "\($0.host ?? "")\($0.port.map { ":\($0)" } ?? "")" } ?? endpoint
            throw StoreBackupError.transfer(TransferErrorText.rewrite(failure, destination: displayName, host: host))
        }
    }

    /// Turns a non-success answer into an error a user can act on (never showing secrets).
    func check(_ response: TransferResponse, expecting statuses: Set<Int>, context: String) throws {
        guard !statuses.contains(response.status) else { return }
        let root = try? XMLElement.parse(response.body)
        let code = root?.value("Code") ?? ""
        let reason: String
        switch (response.status, code) {
        case (_, "SignatureDoesNotMatch"), (_, "InvalidAccessKeyId"), (403, ""):
            reason =
                "\(context): the server rejected the credentials (\(code.isEmpty ? "403" : code)); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        case (_, "NoSuchBucket"):
            reason = "\(context): bucket \"\(bucket)\" does not exist"
        case (_, "AccessDenied"):
            reason = "\(context): access denied to bucket \"\(bucket)\""
        default:
            let message = root?.value("Message") ?? response.bodyText.prefix(200).description
            reason = "\(context): HTTP \(response.status)\(code.isEmpty ? "" : " \(code)")\(message.isEmpty ? "" : ": \(message)")"
        }
        throw StoreBackupError.transferFailed(
            .http(status: response.status), label: displayName, reason,
            serviceCode: code.isEmpty ? nil : code, retryAfter: RetryingTransport.retryAfter(response))
    }
}
