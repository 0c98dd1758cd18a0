import COpenSSL
import Crypto
import Foundation

/// WinZip AES-256 (AE-2), the ZIP encryption 7-Zip, WinZip and libzip read.
///
/// An encrypted entry's data is: a random 16-byte salt, a 2-byte password verifier, the
/// compressed data encrypted with AES-256 in counter mode, and the first 10 bytes of an
/// HMAC-SHA1 over that ciphertext. The AES key, the HMAC key and the verifier all come
/// from PBKDF2-HMAC-SHA1 (1000 rounds) of the password and the salt.
///
/// storebackup encrypts and decrypts itself instead of through libzip (whose AES runs on
/// one core, slower than compression) because counter mode can be computed at any offset: the
/// keystream of byte `n` needs only `n`, so blocks can be handled on any thread, and only
/// the cheap HMAC has to run in order.
enum WinZipAES {
    static let saltLength = 16
    static let verifierLength = 2
    static let authenticationCodeLength = 10
    /// Salt and verifier, before the ciphertext.
    static let headerLength = saltLength + verifierLength
    /// Bytes an encrypted entry has beyond its compressed data.
    static let overhead = headerLength + authenticationCodeLength
    static let keyLength = 32
    static let rounds: UInt32 = 1000

    struct Keys: Sendable {
        let encryption: [UInt8]
        let authentication: [UInt8]
        let verifier: [UInt8]
    }

    /// What one encrypted entry needs: a fresh salt (so no two entries share a keystream)
    /// and the keys derived from it.
    struct EntrySecrets: Sendable {
        /// Salt and verifier: the first bytes of the entry's data.
        let header: [UInt8]
        let keys: Keys

        init(password: BackupPassword) throws {
            let salt = try WinZipAES.randomSalt()
            keys = WinZipAES.deriveKeys(password: password, salt: salt)
            header = salt + keys.verifier
        }
    }

    /// PBKDF2-HMAC-SHA1 of the password and salt: AES key, HMAC key, verifier, in that order.
    static func deriveKeys(password: BackupPassword, salt: [UInt8]) -> Keys {
        var derived = PBKDF2SHA1.derive(
            password: password.bytes, salt: salt, rounds: Int(rounds),
            count: keyLength * 2 + verifierLength)
        defer { derived.withUnsafeMutableBytes { _ = memset($0.baseAddress!, 0, $0.count) } }
        return Keys(
            encryption: Array(derived[0..<keyLength]),
            authentication: Array(derived[keyLength..<keyLength * 2]),
            verifier: Array(derived[(keyLength * 2)...]))
    }

    static func randomSalt() throws -> [UInt8] {
        var salt = [UInt8](repeating: 0, count: saltLength)
        guard RAND_bytes(&salt, Int32(saltLength)) == 1 else {
            throw StoreBackupError.archiveWrite(reason: "no random bytes for the encryption salt")
        }
        return salt
    }
}

/// AES-256 in counter mode with WinZip's counter: a 16-byte little-endian number that
/// is 1 for the first 16 bytes of an entry's data. (Standard CTR, as in swift-crypto's
/// AES._CTR, counts big-endian, so it cannot produce this keystream.) The counter blocks
/// are encrypted with OpenSSL's AES-ECB, which uses AES-NI where the CPU has it.
/// One instance per thread: an OpenSSL cipher context is not shared.
final class WinZipCTR {
    private let context: OpaquePointer
    private static let chunkBlocks = 4096
    private let counters: UnsafeMutableRawPointer
    private let keystream: UnsafeMutableRawPointer
    private var key: [UInt8] = []

    init(key: [UInt8]? = nil) throws {
        guard let context = EVP_CIPHER_CTX_new() else { throw StoreBackupError.archiveWrite(reason: "cannot set up AES") }
        self.context = context
        counters = .allocate(byteCount: Self.chunkBlocks * 16, alignment: 64)
        keystream = .allocate(byteCount: Self.chunkBlocks * 16 + 16, alignment: 64)
        if let key { try use(key: key) }
    }

    /// Switches to another entry's key (cheap: an AES key schedule).
    func use(key: [UInt8]) throws {
        guard key != self.key else { return }
        guard key.count == WinZipAES.keyLength,
            EVP_EncryptInit_ex(context, EVP_aes_256_ecb(), nil, key, nil) == 1,
            EVP_CIPHER_CTX_set_padding(context, 0) == 1
        else {
            throw StoreBackupError.archiveWrite(reason: "cannot set up AES")
        }
        self.key = key
    }

    deinit {
        EVP_CIPHER_CTX_free(context)
        counters.deallocate()
        keystream.deallocate()
    }

    /// XORs `count` bytes at `bytes` with the keystream from byte `offset` of the entry's
    /// (encrypted) data. Encrypting and decrypting are the same operation.
    func apply(to bytes: UnsafeMutableRawPointer, count: Int, at offset: Int64) {
        var done = 0
        while done < count {
            let position = offset + Int64(done)
            let skip = Int(position % 16)
            let firstCounter = UInt64(position / 16) + 1
            let blocks = min(Self.chunkBlocks, (skip + count - done + 15) / 16)
            for index in 0..<blocks {
                counters.storeBytes(of: (firstCounter + UInt64(index)).littleEndian, toByteOffset: index * 16, as: UInt64.self)
                counters.storeBytes(of: UInt64(0), toByteOffset: index * 16 + 8, as: UInt64.self)
            }
            var produced: Int32 = 0
            let rc = EVP_EncryptUpdate(
                context, keystream.assumingMemoryBound(to: UInt8.self), &produced,
                counters.assumingMemoryBound(to: UInt8.self), Int32(blocks * 16))
            precondition(rc == 1 && produced == Int32(blocks * 16), "AES-ECB failed")
            let length = min(count - done, blocks * 16 - skip)
            Self.xor(bytes + done, with: keystream + skip, count: length)
            done += length
        }
    }

    private static func xor(_ target: UnsafeMutableRawPointer, with source: UnsafeRawPointer, count: Int) {
        var index = 0
        while index + 8 <= count {
            let value =
                target.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                ^ source.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            target.storeBytes(of: value, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < count {
            let value = target.load(fromByteOffset: index, as: UInt8.self) ^ source.load(fromByteOffset: index, as: UInt8.self)
            target.storeBytes(of: value, toByteOffset: index, as: UInt8.self)
            index += 1
        }
    }
}

/// The HMAC-SHA1 over an entry's ciphertext, fed in order; its first 10 bytes end the entry.
struct WinZipAuthenticator {
    private var mac: HMAC<Insecure.SHA1>

    init(keys: WinZipAES.Keys) {
        mac = HMAC(key: SymmetricKey(data: keys.authentication))
    }

    /// Feeds the next ciphertext bytes, in order.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        mac.update(data: bytes)
    }

    func code() -> [UInt8] {
        Array(mac.finalize().prefix(WinZipAES.authenticationCodeLength))
    }

    /// True when `code` is the authentication code of everything fed.
    func isAuthentic(code: [UInt8]) -> Bool {
        let expected = self.code()
        guard code.count == expected.count else { return false }
        return zip(code, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// Checks a password against an entry's header (salt and verifier) and gives its keys.
enum WinZipPasswordCheck {
    /// Throws `wrongPassword` when the verifier in `header` does not match.
    static func keys(password: BackupPassword, header: [UInt8], backupName: String) throws -> WinZipAES.Keys {
        guard header.count == WinZipAES.headerLength else {
            throw StoreBackupError.corruptArchive(name: backupName, reason: "an encrypted entry is too short")
        }
        let keys = WinZipAES.deriveKeys(password: password, salt: Array(header[0..<WinZipAES.saltLength]))
        guard Array(header[WinZipAES.saltLength...]) == keys.verifier else {
            throw StoreBackupError.wrongPassword(name: backupName)
        }
        return keys
    }
}
