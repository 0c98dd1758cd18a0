import COpenSSL
import Foundation

/// PBKDF2 with HMAC-SHA1 (RFC 8018), the key derivation WinZip AES prescribes: 1000
/// rounds for every entry, each entry with its own salt. OpenSSL's PKCS5_PBKDF2_HMAC goes
/// through EVP and copies a whole digest context per HMAC, and a store of many small files
/// pays that per file. This computes the same function with the
/// HMAC's inner and outer SHA-1 states prepared once and copied as plain structs, so each
/// round is two SHA-1 compressions and little else. `UnitTests` checks it against OpenSSL
/// and RFC 6070's test vectors.
enum PBKDF2SHA1 {
    static func derive(password: [UInt8], salt: [UInt8], rounds: Int, count: Int) -> [UInt8] {
        precondition(rounds >= 1 && count >= 1)
        // HMAC keys longer than a SHA-1 block are hashed first (RFC 2104).
        var key = password.count > 64 ? sha1(password) : password
        key += [UInt8](repeating: 0, count: 64 - key.count)
        var inner = SHA_CTX()
        var outer = SHA_CTX()
        SHA1_Init(&inner)
        SHA1_Init(&outer)
        SHA1_Update(&inner, key.map { $0 ^ 0x36 }, 64)
        SHA1_Update(&outer, key.map { $0 ^ 0x5c }, 64)
        defer {
            // Best effort: the derived states are as good as the password.
            withUnsafeMutableBytes(of: &inner) { _ = memset($0.baseAddress!, 0, $0.count) }
            withUnsafeMutableBytes(of: &outer) { _ = memset($0.baseAddress!, 0, $0.count) }
            key.withUnsafeMutableBytes { _ = memset($0.baseAddress!, 0, $0.count) }
        }

        var result: [UInt8] = []
        var blockNumber: UInt32 = 1
        var u = [UInt8](repeating: 0, count: 20)
        var next = [UInt8](repeating: 0, count: 20)
        var sum = [UInt8](repeating: 0, count: 20)
        var innerDigest = [UInt8](repeating: 0, count: 20)
        while result.count < count {
            let first = salt + withUnsafeBytes(of: blockNumber.bigEndian, Array.init)
            hmac(first, length: first.count, inner: inner, outer: outer, scratch: &innerDigest, into: &u)
            sum = u
            for _ in 1..<rounds {
                hmac(u, length: 20, inner: inner, outer: outer, scratch: &innerDigest, into: &next)
                swap(&u, &next)
                for index in 0..<20 { sum[index] ^= u[index] }
            }
            result += sum
            blockNumber += 1
        }
        return Array(result.prefix(count))
    }

    /// HMAC-SHA1 of `message` from the prepared key states.
    private static func hmac(
        _ message: UnsafeRawPointer, length: Int, inner: SHA_CTX, outer: SHA_CTX,
        scratch: inout [UInt8], into output: inout [UInt8]
    ) {
        var innerState = inner
        SHA1_Update(&innerState, message, length)
        SHA1_Final(&scratch, &innerState)
        var outerState = outer
        SHA1_Update(&outerState, scratch, 20)
        SHA1_Final(&output, &outerState)
    }

    private static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        var context = SHA_CTX()
        var digest = [UInt8](repeating: 0, count: 20)
        SHA1_Init(&context)
        SHA1_Update(&context, bytes, bytes.count)
        SHA1_Final(&digest, &context)
        return digest
    }
}
