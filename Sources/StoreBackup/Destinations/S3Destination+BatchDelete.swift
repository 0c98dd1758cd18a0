import Crypto
import Foundation

/// Retention's deletes in one request per 1,000 backups (S3 DeleteObjects) instead of a
/// `HEAD` and a `DELETE` each: at a point a minute, expired points are most of a day's
/// requests otherwise.
///
/// Only on a bucket without versioning and without Object Lock: there, deleting by key
/// removes the bytes. On a versioned bucket a delete by key only hides the object behind a
/// delete marker, and a locked one must be refused one by one with its lock said, so those
/// are deleted one by one as ``delete(_:cancel:)`` does.
extension S3Destination {
    /// The most keys S3 takes in one DeleteObjects request.
    static let deleteBatchLimit = 1_000

    func deleteBatch(_ names: [String]) async throws -> [String: String]? {
        try await runBlocking(name: threadName + "-delete") { try deleteBatch(names, cancel: $0) }
    }

    /// Deletes `names` (each validated) in requests of up to ``deleteBatchLimit`` keys, in
    /// the order given; returns the names the server did not delete, each with its answer
    /// (a missing key counts as deleted). Nil, with nothing deleted, when the bucket is
    /// versioned or locked.
    func deleteBatch(_ names: [String], cancel: CancellationFlag) throws -> [String: String]? {
        guard objectLock == nil, try !isVersioned(cancel: cancel) else { return nil }
        for name in names { try BackupName.validate(name) }
        var failures: [String: String] = [:]
        var start = names.startIndex
        while start < names.endIndex {
            try cancel.throwIfCancelled()
            let end = min(start + Self.deleteBatchLimit, names.endIndex)
            let body = Data(Self.deleteRequestBody(keys: names[start..<end].map { key($0) }).utf8)
            var post = request("POST", url(query: [("delete", "")]), label: displayName)
            post.body = .bytes(body)
            post.headers.append(("Content-Type", "application/xml"))
            // DeleteObjects requires it: the server refuses a body changed on the way.
            post.headers.append(("Content-MD5", FileDigest.base64(Insecure.MD5.hash(data: body))))
            let response = try perform(post, cancel: cancel)
            try check(response, expecting: [200], context: "delete \(end - start) backups")
            let listPrefix = prefix.isEmpty ? "" : prefix + "/"
            for (key, answer) in try Self.failedKeys(inDeleteResult: response.body) where key.hasPrefix(listPrefix) {
                failures[String(key.dropFirst(listPrefix.count))] = answer
            }
            start = end
        }
        return failures
    }

    /// Whether the bucket keeps versions (GetBucketVersioning says Enabled or Suspended);
    /// an answer other than 200 counts as versioned, so that nothing is deleted by key.
    private func isVersioned(cancel: CancellationFlag) throws -> Bool {
        let response = try perform(request("GET", url(query: [("versioning", "")]), label: displayName), cancel: cancel)
        guard response.status == 200, let root = try? XMLElement.parse(response.body) else { return true }
        return root.value("Status").map { !$0.isEmpty } ?? false
    }

    /// A quiet DeleteObjects body: the answer lists only the keys that failed.
    static func deleteRequestBody(keys: [String]) -> String {
        var xml = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>"
        for key in keys { xml += "<Object><Key>\(escapedXMLText(key))</Key></Object>" }
        return xml + "</Delete>"
    }

    /// The keys a DeleteObjects answer reports as failed, each with "Code: Message".
    /// S3 may answer 200 with a top-level `Error`: then the whole request failed.
    static func failedKeys(inDeleteResult body: Data) throws -> [(key: String, answer: String)] {
        let root = try XMLElement.parse(body)
        if root.name == "Error" {
            throw StoreBackupError.transferFailed(
                .other, label: "DeleteObjects", "delete: \(root.value("Code") ?? "") \(root.value("Message") ?? "")",
                serviceCode: root.value("Code"), retryAfter: nil)
        }
        return root.all("Error").compactMap { error in
            guard let key = error.value("Key") else { return nil }
            return (key, "\(error.value("Code") ?? "?"): \(error.value("Message") ?? "")")
        }
    }

    private static func escapedXMLText(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}
