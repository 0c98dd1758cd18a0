import Foundation
import XCTest

/// Signed S3 requests made by curl (`--aws-sigv4`), independent of the code under test:
/// what a test sees through these is the server's own view. The keys reach curl on its
/// stdin (`-K -`), never on its command line.
struct S3RawRequest {
    let endpoint: String
    let bucket: String
    let accessKey: String
    let secretKey: String

    init(server: [String: Any]) {
        endpoint = server["endpoint"] as! String
        bucket = server["bucket"] as! String
        accessKey = server["access_key"] as! String
        secretKey = server["secret_key"] as! String
    }

    /// Runs curl against `path` (after the bucket; with its query, parameters sorted and
    /// valueless ones written `name=` as SigV4 wants); returns the status and the body.
    func send(_ method: String, _ path: String, bodyFile: String? = nil) throws -> (status: Int, body: String) {
        var arguments = [
            "-sS", "-K", "-", "--aws-sigv4", "aws:amz:us-east-1:s3", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
            "-X", method, "-w", "\n%{http_code}",
        ]
        // curl would call the body a form, which moto then reads as one (and stores nothing).
        if let bodyFile { arguments += ["--data-binary", "@" + bodyFile, "-H", "Content-Type: application/octet-stream"] }
        arguments.append(endpoint + "/" + bucket + path)
        let result = try runTool("/usr/bin/curl", arguments, stdin: "user = \"\(accessKey):\(secretKey)\"\n")
        guard result.status == 0, let newline = result.stdout.lastIndex(of: "\n") else {
            throw NSError(
                domain: "S3RawRequest", code: Int(result.status), userInfo: [NSLocalizedDescriptionKey: "curl failed: \(result.stderr)"])
        }
        return (Int(result.stdout[result.stdout.index(after: newline)...]) ?? 0, String(result.stdout[..<newline]))
    }

    /// Puts `data` under `key`, whatever the key is (names storebackup would never upload).
    func put(_ key: String, _ data: Data) throws {
        let file = NSTemporaryDirectory() + "s3raw-\(UUID().uuidString)"
        try data.write(to: URL(fileURLWithPath: file))
        defer { unlink(file) }
        let answer = try send("PUT", "/" + Self.encode(key), bodyFile: file)
        XCTAssertEqual(answer.status, 200, answer.body)
    }

    /// Keys of the multipart uploads in progress under `prefix` (ListMultipartUploads).
    /// rclone answers 404 NoSuchUpload when there are none.
    func multipartUploads(prefix: String) throws -> [String] {
        let answer = try send("GET", "?prefix=\(Self.encode(prefix, keepingSlashes: false))&uploads=")
        if answer.status == 404 && answer.body.contains("NoSuchUpload") { return [] }
        XCTAssertEqual(answer.status, 200, answer.body)
        return Self.elements("Key", in: answer.body)
    }

    /// Keys of every object under `prefix` (ListObjectsV2, followed to its last page).
    func objectKeys(prefix: String) throws -> [String] {
        var keys: [String] = []
        var token: String?
        repeat {
            let continuation = token.map { "continuation-token=\(Self.encode($0, keepingSlashes: false))&" } ?? ""
            let answer = try send("GET", "?\(continuation)list-type=2&prefix=\(Self.encode(prefix, keepingSlashes: false))")
            XCTAssertEqual(answer.status, 200, answer.body)
            keys += Self.elements("Key", in: answer.body)
            token =
                Self.elements("IsTruncated", in: answer.body).first == "true"
                ? Self.elements("NextContinuationToken", in: answer.body).first : nil
        } while token != nil
        return keys
    }

    /// The object `key`'s bytes, as the server sends them.
    func get(_ key: String) throws -> Data {
        let file = NSTemporaryDirectory() + "s3raw-\(UUID().uuidString)"
        defer { unlink(file) }
        let result = try runTool(
            "/usr/bin/curl",
            [
                "-sS", "-f", "-K", "-", "--aws-sigv4", "aws:amz:us-east-1:s3", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "-o", file, endpoint + "/" + bucket + "/" + Self.encode(key),
            ],
            stdin: "user = \"\(accessKey):\(secretKey)\"\n")
        XCTAssertEqual(result.status, 0, "GET \(key): \(result.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: file))
    }

    /// The texts of the XML elements named `name`, unescaped.
    static func elements(_ name: String, in xml: String) -> [String] {
        xml.components(separatedBy: "<\(name)>").dropFirst().compactMap { $0.components(separatedBy: "</\(name)>").first }.map {
            $0.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">").replacingOccurrences(
                of: "&quot;", with: "\""
            )
            .replacingOccurrences(of: "&apos;", with: "'").replacingOccurrences(of: "&#39;", with: "'").replacingOccurrences(
                of: "&amp;", with: "&")
        }
    }

    /// Starts a multipart upload of `key` and leaves it unfinished.
    func startMultipartUpload(_ key: String) throws {
        let answer = try send("POST", "/" + Self.encode(key) + "?uploads=")
        XCTAssertEqual(answer.status, 200, answer.body)
    }

    /// Percent-encoding as SigV4 canonicalizes it; a query value encodes its slashes too.
    static func encode(_ text: String, keepingSlashes: Bool = true) -> String {
        var allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        if keepingSlashes { allowed.insert("/") }
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
