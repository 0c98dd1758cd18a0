import Foundation

/// The small pieces of Dropbox's HTTP API v2 conventions the destination needs: JSON
/// arguments (in the body for RPC routes, in the `Dropbox-API-Arg` header for content
/// routes) and the error bodies of 409 route errors.
enum DropboxAPI {
    /// JSON for a request, compact, with every character above 0x7E written as `\uXXXX`:
    /// `Dropbox-API-Arg` must be HTTP-header-safe, and Dropbox rejects raw non-ASCII there.
    static func json(_ object: [String: Any]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        var text = ""
        for scalar in String(decoding: data, as: UTF8.self).unicodeScalars {
            if scalar.value <= 0x7E {
                text.unicodeScalars.append(scalar)
            } else {
                // UTF-16 code units: characters beyond the BMP become a surrogate pair.
                for unit in String(scalar).utf16 { text += String(format: "\\u%04x", unit) }
            }
        }
        return text
    }

    /// A JSON object from a response body or header (nil when it is not one).
    static func object(_ data: Data) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    static func int64(_ value: Any?) -> Int64? {
        if let number = value as? NSNumber { return number.int64Value }
        return nil
    }
}

/// A 409 route error (or a 401/429 error body), read from its structured `error` field.
/// Dropbox's `error_summary` is meant for people, so decisions are made on the tags.
struct DropboxRouteError {
    /// The chain of union tags from the outside in, e.g. `["path", "conflict", "file"]`
    /// or `["lookup_failed", "incorrect_offset"]`.
    var tags: [String]
    /// `correct_offset` of an `incorrect_offset` error, wherever it is nested.
    var correctOffset: Int64?
    /// The human summary, trailing slashes and dots removed.
    var summary: String

    init?(_ body: Data) {
        guard let root = DropboxAPI.object(body) else { return nil }
        var tags: [String] = []
        var correctOffset: Int64?
        var current = root["error"] as? [String: Any]
        while let union = current, let tag = union[".tag"] as? String {
            tags.append(tag)
            if let offset = DropboxAPI.int64(union["correct_offset"]) { correctOffset = offset }
            // The value sits under the tag's own name (`"path": {...}`), or under another
            // field for some unions (`UploadWriteFailed.reason`).
            current =
                union[tag] as? [String: Any]
                ?? union.first { $0.key != ".tag" && ($0.value as? [String: Any])?[".tag"] != nil }?.value as? [String: Any]
        }
        self.tags = tags
        self.correctOffset = correctOffset
        var summary = (root["error_summary"] as? String) ?? tags.joined(separator: "/")
        while let last = summary.last, last == "." || last == "/" { summary.removeLast() }
        self.summary = summary
    }

    func has(_ tag: String) -> Bool { tags.contains(tag) }

    /// The tags as one code, e.g. `path/conflict/file` (``TransferFailure/serviceCode``).
    var code: String { tags.joined(separator: "/") }
}
