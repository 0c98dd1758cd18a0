import Crypto
import Foundation

/// Digests of a local file (or a slice of it), read in bounded chunks: the checksums an
/// upload sends (S3 `Content-MD5`) or compares with what the server stored.
enum FileDigest {
    /// MD5 of `[offset, offset + length)`.
    static func md5(file: String, offset: Int64 = 0, length: Int64) throws -> Insecure.MD5.Digest {
        var hasher = Insecure.MD5()
        try DropboxContentHasher.read(file: file, offset: offset, length: length) { _, bytes in hasher.update(bufferPointer: bytes) }
        return hasher.finalize()
    }

    /// SHA-256 of `[offset, offset + length)`, as lower-case hex.
    static func sha256(file: String, offset: Int64 = 0, length: Int64) throws -> String {
        var hasher = SHA256()
        try DropboxContentHasher.read(file: file, offset: offset, length: length) { _, bytes in hasher.update(bufferPointer: bytes) }
        return hex(hasher.finalize())
    }

    /// Lower-case hex of a digest.
    static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        digest.map { String(format: "%02x", $0) }.joined()
    }

    /// Base64 of a digest (HTTP `Content-MD5`).
    static func base64<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        Data(digest).base64EncodedString()
    }
}
