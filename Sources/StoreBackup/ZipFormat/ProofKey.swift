import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The secret that authenticates the database proofs of unencrypted backups (docs/FORMAT.md,
/// "Database proofs"). Anyone who can write to a destination can write a manifest, so a
/// proof counts only when it was made with a key the destination never sees: this one, kept
/// beside the configuration (mode 0600) and stored off-site with the passwords. Encrypted
/// backups need no key file: their proofs are keyed by the password.
///
/// Its bytes never appear in descriptions: printing one shows only its identifier.
public struct ProofKey: Sendable, Equatable, CustomStringConvertible {
    let bytes: [UInt8]
    static let length = 32

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// `$STOREBACKUP_PROOF_KEY_FILE` when set, else `~/.config/storebackup/proof.key` (beside
    /// the credentials file).
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let path = environment["STOREBACKUP_PROOF_KEY_FILE"], !path.isEmpty { return path }
        return (environment["HOME"] ?? NSHomeDirectory()) + "/.config/storebackup/proof.key"
    }

    /// The key in `path`: one line of 64 hex digits, in a regular file that only its owner can
    /// read (a key others can read could forge proofs).
    public init(contentsOfFile path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw StoreBackupError.proofKeyUnusable(path: path, reason: "cannot read it: \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw StoreBackupError.proofKeyUnusable(path: path, reason: "not a regular file") }
        guard info.st_mode & 0o077 == 0 else {
            throw StoreBackupError.proofKeyUnusable(path: path, reason: "others can read it; chmod 600 it")
        }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw StoreBackupError.proofKeyUnusable(path: path, reason: "cannot open it")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: 4096)) ?? Data()
        let line = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        guard let bytes = FileDigest.bytes(hex: line.trimmingCharacters(in: .whitespaces)), bytes.count == Self.length else {
            throw StoreBackupError.proofKeyUnusable(path: path, reason: "it does not hold a key (one line of 64 hex digits)")
        }
        self.bytes = bytes
    }

    /// The key in `path`, made first (32 random bytes, written durably with mode 0600, its
    /// folder made 0700) when there is no file there yet.
    public static func loadOrCreate(at path: String) throws -> ProofKey {
        if FileManager.default.fileExists(atPath: path) { return try ProofKey(contentsOfFile: path) }
        var generator = SystemRandomNumberGenerator()
        let key = ProofKey(bytes: (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, !FileManager.default.fileExists(atPath: parent) {
            try FileManager.default.createDirectory(
                atPath: parent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let text = "\(FileDigest.hex(key.bytes))\n"
        do { try DurableFile.write(Data(text.utf8), to: path, mode: 0o600) } catch {
            throw StoreBackupError.proofKeyUnusable(path: path, reason: "cannot write it: \(error)")
        }
        return key
    }

    /// A public name for the key (16 hex digits of a hash of it), recorded with each proof so
    /// that a restore can say "made with another key" rather than "forged".
    public var identifier: String {
        var hasher = SHA256()
        hasher.update(data: Array("storebackup proof key id".utf8) + [0] + bytes)
        return String(FileDigest.hex(hasher.finalize()).prefix(16))
    }

    /// The key hidden: `<proof key IDENTIFIER>`.
    public var description: String { "<proof key \(identifier)>" }
}
