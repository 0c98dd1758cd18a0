import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Digests of a local file (or a slice of it), read in bounded chunks: the checksums an
/// upload sends (S3 `Content-MD5`) or compares with what the server stored.
enum FileDigest {
    /// MD5 of `[offset, offset + length)`.
    static func md5(file: String, offset: Int64 = 0, length: Int64) throws -> Insecure.MD5.Digest {
        var hasher = Insecure.MD5()
        try read(file: file, offset: offset, length: length) { _, bytes in hasher.update(bufferPointer: bytes) }
        return hasher.finalize()
    }

    /// SHA-256 of `[offset, offset + length)`, as lower-case hex.
    static func sha256(file: String, offset: Int64 = 0, length: Int64) throws -> String {
        var hasher = SHA256()
        try read(file: file, offset: offset, length: length) { _, bytes in hasher.update(bufferPointer: bytes) }
        return hex(hasher.finalize())
    }

    /// Reads `length` bytes of `file` from `offset` in 1 MiB pieces and hands each
    /// piece, with its absolute offset, to `consume`.
    static func read(
        file: String, offset: Int64, length: Int64,
        _ consume: (_ at: Int64, _ bytes: UnsafeRawBufferPointer) -> Void
    ) throws {
        let descriptor = open(file, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: file, operation: "open for hashing", errno: errno) }
        defer { close(descriptor) }
        try read(descriptor: descriptor, path: file, offset: offset, length: length, consume)
    }

    /// ``read(file:offset:length:_:)`` through a descriptor already open for reading (`file`
    /// names it in messages); an error `consume` throws ends the reading.
    static func read(
        descriptor: Int32, path file: String, offset: Int64, length: Int64,
        _ consume: (_ at: Int64, _ bytes: UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var position = offset
        let end = offset + length
        while position < end {
            let want = Int(min(Int64(buffer.count), end - position))
            let got = try PositionedRead.some(
                descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: position, path: file,
                operation: "read for hashing")
            guard got > 0 else { throw StoreBackupError.io(path: file, operation: "read for hashing", errno: EIO) }
            try consume(position, UnsafeRawBufferPointer(rebasing: buffer[0..<got]))
            position += Int64(got)
        }
    }

    /// Lower-case hex of a digest. (A table lookup: `String(format: "%02x")` per byte showed up
    /// in create's reader thread on a store of many small files.)
    static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        var characters: [UInt8] = []
        characters.reserveCapacity(64)
        for byte in digest {
            characters.append(hexDigits[Int(byte >> 4)])
            characters.append(hexDigits[Int(byte & 0x0f)])
        }
        return String(decoding: characters, as: UTF8.self)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// The bytes that hex text (either case) spells; nil for anything else.
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index...index + 1], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }

    /// Base64 of a digest (HTTP `Content-MD5`).
    static func base64<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        Data(digest).base64EncodedString()
    }
}
