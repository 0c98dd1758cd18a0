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
public struct S3Destination: BackupDestination {
    /// The bucket, from `s3://BUCKET/PREFIX`.
    public let bucket: String
    /// The key prefix (a "folder"), without slashes at either end; may be empty.
    public let prefix: String
    let endpoint: String
    let region: String
    let accessKey: String
    let secretKey: String
    let sessionToken: String?
    let transport: RetryingTransport

    /// Objects above this size use a multipart upload.
    static let multipartThreshold: Int64 = 32 << 20
    static let minimumPartSize: Int64 = 16 << 20
    static let maximumParts: Int64 = 10_000
    static let partConcurrency = 4

    /// Parses `s3://BUCKET/PREFIX` and reads the credentials and region as ``DestinationOptions`` describes.
    public static func make(url: String, options: DestinationOptions) throws -> S3Destination {
        guard let components = URLComponents(string: url), components.scheme == "s3",
              let bucket = components.host, !bucket.isEmpty else {
            throw StoreBackupError.invalidDestination(url: url, reason: "expected s3://BUCKET/PREFIX")
        }
        guard let accessKey = try options.credential("AWS_ACCESS_KEY_ID"),
              let secretKey = try options.credential("AWS_SECRET_ACCESS_KEY") else {
            throw StoreBackupError.invalidDestination(
                url: url, reason: "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (environment or credentials file)")
        }
        let region = try options.credential("AWS_REGION") ?? (try options.credential("AWS_DEFAULT_REGION")) ?? "us-east-1"
        var endpoint = try options.s3Endpoint ?? (try options.credential("AWS_ENDPOINT_URL")) ?? "https://s3.\(region).amazonaws.com"
        while endpoint.hasSuffix("/") { endpoint.removeLast() }
        guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://") else {
            throw StoreBackupError.invalidDestination(url: endpoint, reason: "the S3 endpoint must be an http:// or https:// URL")
        }
        let prefix = components.path.split(separator: "/").joined(separator: "/")
        return S3Destination(
            bucket: bucket, prefix: prefix, endpoint: endpoint, region: region, accessKey: accessKey,
            secretKey: secretKey, sessionToken: try options.credential("AWS_SESSION_TOKEN"),
            transport: RetryingTransport(options: options.transport, policy: options.retry))
    }

    public var displayName: String { "s3://\(bucket)" + (prefix.isEmpty ? "" : "/\(prefix)") }
    public var stagingDirectory: String? { nil }

    private func key(_ name: String) -> String { prefix.isEmpty ? name : prefix + "/" + name }

    /// Path-style URL; `query` must already be in canonical order (libcurl signs it as written).
    private func url(key: String? = nil, query: [(String, String)] = []) -> String {
        var text = endpoint + "/" + URLPath.encodeComponent(bucket)
        if let key { text += "/" + URLPath.encode(key) }
        if !query.isEmpty {
            text += "?" + query.sorted { $0.0 < $1.0 }
                .map { URLPath.encodeComponent($0.0) + "=" + URLPath.encodeComponent($0.1) }
                .joined(separator: "&")
        }
        return text
    }

    private func request(_ method: String, _ url: String, label: String) -> TransferRequest {
        var request = TransferRequest(method: method, url: url, label: label)
        request.credentials = .awsSigV4(accessKey: accessKey, secretKey: secretKey, region: region, service: "s3")
        request.headers.append(("x-amz-content-sha256", "UNSIGNED-PAYLOAD"))
        if let sessionToken { request.headers.append(("x-amz-security-token", sessionToken)) }
        return request
    }

    // MARK: list

    public func listBackups() async throws -> [BackupListing] {
        try await runBlocking(name: "storebackup-s3-list") { cancel in
            var listings: [BackupListing] = []
            var token: String?
            let listPrefix = prefix.isEmpty ? "" : prefix + "/"
            repeat {
                var query = [("list-type", "2"), ("prefix", listPrefix), ("delimiter", "/")]
                if let token { query.append(("continuation-token", token)) }
                let response = try transport.perform(request("GET", url(query: query), label: displayName), cancel: cancel)
                try check(response, expecting: [200], context: "list")
                let root = try XMLElement.parse(response.body)
                for object in root.all("Contents") {
                    guard let key = object.value("Key"), key.hasPrefix(listPrefix) else { continue }
                    let name = String(key.dropFirst(listPrefix.count))
                    guard BackupName.isBackup(name), !name.contains("/") else { continue }
                    let modified = object.value("LastModified").flatMap(Self.parseDate)
                    listings.append(BackupListing(
                        name: name, size: Int64(object.value("Size") ?? "") ?? 0,
                        date: BackupName.date(of: name) ?? modified ?? Date(timeIntervalSince1970: 0), modified: modified))
                }
                token = root.value("IsTruncated") == "true" ? root.value("NextContinuationToken") : nil
            } while token != nil
            return listings
        }
    }

    // MARK: upload

    public func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try BackupName.validate(name)
        let size = try FileSystem.lstatInfo(file).st_size
        try await runBlocking(name: "storebackup-s3-upload") { cancel in
            if try exists(key: key(name), cancel: cancel) {
                throw StoreBackupError.backupExists(name: name, destination: displayName)
            }
            if Int64(size) <= Self.multipartThreshold {
                var put = request("PUT", url(key: key(name)), label: "\(displayName)/\(name)")
                put.body = .file(path: file, offset: 0, length: Int64(size))
                let response = try transport.perform(put, cancel: cancel) { sent, _ in
                    progress?(BackupProgress(phase: .uploading, bytesDone: sent, bytesTotal: Int64(size)))
                }
                try check(response, expecting: [200], context: "upload \(name)")
            } else {
                try MultipartUpload(destination: self, key: key(name), file: file, size: Int64(size), cancel: cancel, progress: progress).run()
            }
        }
    }

    func exists(key: String, cancel: CancellationFlag?) throws -> Bool {
        let response = try transport.perform(request("HEAD", url(key: key), label: displayName), cancel: cancel)
        if response.status == 404 { return false }
        try check(response, expecting: [200], context: "look up \(key)")
        return true
    }

    /// One multipart upload: create, parts in parallel from the file, complete; abort on failure.
    struct MultipartUpload {
        let destination: S3Destination
        let key: String
        let file: String
        let size: Int64
        let cancel: CancellationFlag
        let progress: ProgressHandler?

        /// Parts of at least 16 MiB, larger when needed to stay under 10,000 parts.
        var partSize: Int64 {
            let needed = (size + S3Destination.maximumParts - 1) / S3Destination.maximumParts
            let mebibyte: Int64 = 1 << 20
            return max(S3Destination.minimumPartSize, (needed + mebibyte - 1) / mebibyte * mebibyte)
        }

        func run() throws {
            let label = "\(destination.displayName)/\(key)"
            let created = try destination.transport.perform(
                destination.request("POST", destination.url(key: key, query: [("uploads", "")]), label: label), cancel: cancel)
            try destination.check(created, expecting: [200], context: "start upload")
            guard let uploadID = try XMLElement.parse(created.body).value("UploadId") else {
                throw StoreBackupError.destination(destination: destination.displayName, reason: "the server did not return an upload id")
            }
            do {
                let etags = try uploadParts(uploadID: uploadID, label: label)
                try complete(uploadID: uploadID, etags: etags, label: label)
            } catch {
                abort(uploadID: uploadID, label: label)
                throw error
            }
        }

        private func uploadParts(uploadID: String, label: String) throws -> [String] {
            let count = Int((size + partSize - 1) / partSize)
            let queue = WorkQueue(items: Array(1...count))
            let failures = FirstFailure()
            let results = PartResults(count: count)
            let sent = ByteCounter()
            let group = DispatchGroup()
            for _ in 0..<min(S3Destination.partConcurrency, count) {
                group.enter()
                Thread {
                    defer { group.leave() }
                    while let number = queue.next(), !failures.hasFailed {
                        do {
                            let offset = Int64(number - 1) * partSize
                            let length = min(partSize, size - offset)
                            var put = destination.request(
                                "PUT", destination.url(key: key, query: [("partNumber", "\(number)"), ("uploadId", uploadID)]),
                                label: "\(label) part \(number)")
                            put.body = .file(path: file, offset: offset, length: length)
                            let response = try destination.transport.perform(put, cancel: cancel)
                            try destination.check(response, expecting: [200], context: "upload part \(number)")
                            guard let etag = response.header("etag") else {
                                throw StoreBackupError.destination(destination: destination.displayName, reason: "part \(number) has no ETag")
                            }
                            results.set(number, etag)
                            let done = sent.add(length)
                            progress?(BackupProgress(phase: .uploading, bytesDone: done, bytesTotal: size))
                        } catch {
                            failures.record(error)
                        }
                    }
                }.start()
            }
            group.wait()
            if let error = failures.first { throw error }
            try cancel.throwIfCancelled()
            return results.all
        }

        private func complete(uploadID: String, etags: [String], label: String) throws {
            var xml = "<CompleteMultipartUpload>"
            for (index, etag) in etags.enumerated() {
                xml += "<Part><PartNumber>\(index + 1)</PartNumber><ETag>\(etag)</ETag></Part>"
            }
            xml += "</CompleteMultipartUpload>"
            var post = destination.request("POST", destination.url(key: key, query: [("uploadId", uploadID)]), label: label)
            post.body = .bytes(Data(xml.utf8))
            post.headers.append(("Content-Type", "application/xml"))
            let response = try destination.transport.perform(post, cancel: cancel)
            try destination.check(response, expecting: [200], context: "complete upload")
            // S3 may answer 200 and still report an error in the body.
            if let root = try? XMLElement.parse(response.body), root.name == "Error" {
                throw StoreBackupError.destination(destination: destination.displayName,
                                                   reason: "completing the upload failed: \(root.value("Message") ?? root.value("Code") ?? "unknown")")
            }
        }

        private func abort(uploadID: String, label: String) {
            let request = destination.request("DELETE", destination.url(key: key, query: [("uploadId", uploadID)]), label: label)
            _ = try? destination.transport.perform(request, cancel: nil)
        }
    }

    /// Keys of multipart uploads started under this prefix and never completed or aborted
    /// (orphaned parts cost money on real S3).
    func pendingUploads() async throws -> [String] {
        try await runBlocking(name: "storebackup-s3-uploads") { cancel in
            let listPrefix = prefix.isEmpty ? "" : prefix + "/"
            let response = try transport.perform(
                request("GET", url(query: [("prefix", listPrefix), ("uploads", "")]), label: displayName), cancel: cancel)
            try check(response, expecting: [200], context: "list uploads")
            return try XMLElement.parse(response.body).all("Upload").compactMap { $0.value("Key") }
        }
    }

    // MARK: download and delete

    public func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        try BackupName.validate(name)
        try await runBlocking(name: "storebackup-s3-download") { cancel in
            var get = request("GET", url(key: key(name)), label: "\(displayName)/\(name)")
            get.sink = .file(path: file, offset: 0)
            get = RetryingTransport.resumed(get)
            let response = try transport.perform(get, cancel: cancel) { _, received in
                progress?(BackupProgress(phase: .downloading, bytesDone: received, bytesTotal: 0))
            }
            if response.status == 404 { throw StoreBackupError.backupNotFound(name: name, destination: displayName) }
            try check(response, expecting: [200, 206], context: "download \(name)")
        }
    }

    public func delete(_ name: String) async throws {
        try BackupName.validate(name)
        try await runBlocking(name: "storebackup-s3-delete") { cancel in
            // S3 answers 204 for a missing key too; look first so an unknown name is an error.
            guard try exists(key: key(name), cancel: cancel) else {
                throw StoreBackupError.backupNotFound(name: name, destination: displayName)
            }
            let response = try transport.perform(request("DELETE", url(key: key(name)), label: displayName), cancel: cancel)
            try check(response, expecting: [200, 204], context: "delete \(name)")
        }
    }

    // MARK: errors

    /// Turns a non-success answer into an error a user can act on (never showing secrets).
    func check(_ response: TransferResponse, expecting statuses: Set<Int>, context: String) throws {
        guard !statuses.contains(response.status) else { return }
        let root = try? XMLElement.parse(response.body)
        let code = root?.value("Code") ?? ""
        let reason: String
        switch (response.status, code) {
        case (_, "SignatureDoesNotMatch"), (_, "InvalidAccessKeyId"), (403, ""):
            reason = "\(context): the server rejected the credentials (\(code.isEmpty ? "403" : code)); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        case (_, "NoSuchBucket"):
            reason = "\(context): bucket \"\(bucket)\" does not exist"
        case (_, "AccessDenied"):
            reason = "\(context): access denied to bucket \"\(bucket)\""
        default:
            let message = root?.value("Message") ?? response.bodyText.prefix(200).description
            reason = "\(context): HTTP \(response.status)\(code.isEmpty ? "" : " \(code)")\(message.isEmpty ? "" : ": \(message)")"
        }
        throw TransferError(kind: .http(status: response.status), message: "\(displayName): \(reason)",
                            retryAfter: RetryingTransport.retryAfter(response))
    }

    static func parseDate(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// ETags of uploaded parts, filled in by several threads.
final class PartResults: @unchecked Sendable {
    private let lock = NSLock()
    private var etags: [String]
    init(count: Int) { etags = Array(repeating: "", count: count) }
    func set(_ number: Int, _ etag: String) { lock.withLock { etags[number - 1] = etag } }
    var all: [String] { lock.withLock { etags } }
}
