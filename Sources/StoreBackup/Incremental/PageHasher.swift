import Crypto
import Foundation

/// How page hashes are made (the `hash` byte of a page map).
enum PageHashKind: UInt8, Sendable {
    /// SHA-256 of the page, first 16 bytes (unencrypted chains).
    case sha256 = 1
    /// HMAC-SHA-256 of the page under the chain key, first 16 bytes (encrypted chains), so
    /// the hashes kept beside the store and in the archive say nothing about the pages.
    case hmacSHA256 = 2

    /// The manifest's name for it (`pageMaps[].hash`).
    var manifestName: String { self == .sha256 ? "sha256-128" : "hmac-sha256-128" }
}

/// Hashes database pages (and changed files, in encrypted chains) for change detection.
// Unchecked: SymmetricKey is an immutable value that swift-crypto does not mark Sendable.
struct PageHasher: @unchecked Sendable {
    let kind: PageHashKind
    private let key: SymmetricKey?

    /// Plain SHA-256 (unencrypted chains).
    static let plain = PageHasher(kind: .sha256, key: nil)

    private init(kind: PageHashKind, key: SymmetricKey?) {
        self.kind = kind
        self.key = key
    }

    /// The keyed hasher of an encrypted chain: the key is PBKDF2-HMAC-SHA1 (100,000 rounds,
    /// 32 bytes) of the password with the chain's salt, as docs/FORMAT.md specifies.
    static func keyed(password: BackupPassword, salt: [UInt8]) -> PageHasher {
        let key = PBKDF2SHA1.derive(password: password.bytes, salt: salt, rounds: 100_000, count: 32)
        return PageHasher(kind: .hmacSHA256, key: SymmetricKey(data: key))
    }

    /// 16 random bytes: a new chain's salt.
    static func newSalt() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// The 16-byte hash of `bytes`, written to `output` (16 bytes).
    func hash(_ bytes: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) {
        if let key {
            let code = HMAC<SHA256>.authenticationCode(for: bytes, using: key)
            code.withUnsafeBytes { output.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(16))) }
        } else {
            let digest = SHA256.hash(data: bytes)
            digest.withUnsafeBytes { output.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(16))) }
        }
    }

    /// A value that tells whether a later run derives the same key (the same password and
    /// salt) without keeping the key: the keyed hash of a fixed text. Nil for plain hashes.
    var keyCheck: String? {
        guard let key else { return nil }
        let code = HMAC<SHA256>.authenticationCode(for: Array("storebackup chain key check".utf8), using: key)
        return FileDigest.hex(Array(code).prefix(16))
    }
}
