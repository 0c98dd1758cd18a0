import Crypto
import Foundation

extension Manifest {
    /// A database's proof (docs/FORMAT.md, "Database proofs"): create ran `PRAGMA
    /// integrity_check` on the snapshot, it answered "ok", and these are the bytes it checked.
    /// Trusted only when ``mac`` authenticates under a key the destination does not hold.
    struct DatabaseProof: Codable, Sendable, Equatable {
        /// The check that passed: "integrity_check".
        var check: String
        /// What keys ``mac``: "key-file" (``ProofKey``) or "password" (the backup's password
        /// with the manifest's `proofSalt`).
        var key: String
        /// With "key-file", ``ProofKey/identifier`` of the key that made it.
        var keyId: String?
        /// Lower-case hex HMAC-SHA-256 of the proof's text (``DatabaseProofs/message``).
        var mac: String
        /// The checked bytes' SHA-256 (lower-case hex) and size.
        var sha256: String
        var size: Int64
    }
}

/// What keys the proofs a backup carries or a reader trusts.
// Unchecked: SymmetricKey is an immutable value that swift-crypto does not mark Sendable.
struct ProofSigner: @unchecked Sendable {
    let kind: String
    let keyId: String?
    private let key: SymmetricKey

    static let keyFileKind = "key-file"
    static let passwordKind = "password"

    /// Proofs keyed by a proof key file.
    init(proofKey: ProofKey) {
        kind = Self.keyFileKind
        keyId = proofKey.identifier
        key = SymmetricKey(data: proofKey.bytes)
    }

    /// Proofs keyed by a backup's password: PBKDF2-HMAC-SHA1 (100,000 rounds) of it with the
    /// manifest's `proofSalt`, so a proof says nothing about the password that a guess at the
    /// archive's own key check would not.
    init(password: BackupPassword, salt: [UInt8]) {
        kind = Self.passwordKind
        keyId = nil
        key = SymmetricKey(data: PBKDF2SHA1.derive(password: password.bytes, salt: salt, rounds: 100_000, count: 32))
    }

    func proof(sha256: String, size: Int64) -> Manifest.DatabaseProof {
        Manifest.DatabaseProof(
            check: DatabaseProofs.integrityCheck, key: kind, keyId: keyId, mac: mac(sha256: sha256, size: size), sha256: sha256,
            size: size)
    }

    func authenticates(_ proof: Manifest.DatabaseProof) -> Bool {
        let expected = Array(mac(sha256: proof.sha256, size: proof.size).utf8)
        let given = Array(proof.mac.lowercased().utf8)
        // Compared in full, whatever differs first: the time says nothing about the code.
        guard expected.count == given.count else { return false }
        return zip(expected, given).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    private func mac(sha256: String, size: Int64) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: DatabaseProofs.message(sha256: sha256, size: size), using: key)
        return FileDigest.hex(Array(code))
    }
}

/// Which databases of a backup may skip `PRAGMA integrity_check`, and why each other one runs it.
enum DatabaseProofs {
    static let integrityCheck = "integrity_check"

    /// The text a proof authenticates: the check, and the bytes by SHA-256 and size.
    static func message(sha256: String, size: Int64) -> [UInt8] {
        Array("storebackup database proof 1\ncheck=\(integrityCheck)\nsha256=\(sha256.lowercased())\nsize=\(size)\n".utf8)
    }

    /// 16 random bytes, hex: a manifest's `proofSalt`.
    static func newSalt() -> String {
        var generator = SystemRandomNumberGenerator()
        return FileDigest.hex((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// The verdict on each database `manifest` lists: proven (its bytes, once they match the
    /// manifest's SHA-256, need no `integrity_check`) or the reason it is checked.
    static func verdicts(
        manifest: Manifest?, password: BackupPassword?, proofKey: ProofKey?, checkAnyway: Bool
    ) -> [String: DatabaseVerdict] {
        guard let manifest else { return [:] }
        var files: [String: Manifest.File] = [:]
        for file in manifest.files where file.type == "database" { files[file.path] = file }
        let fileSigner = proofKey.map(ProofSigner.init(proofKey:))
        // Derived once per manifest, and only when a proof needs it (100,000 rounds).
        var passwordSigner: ProofSigner?? = nil
        var verdicts: [String: DatabaseVerdict] = [:]
        for database in manifest.databases {
            verdicts[database.path] = verdict(
                database.proof, file: files[database.path], checkAnyway: checkAnyway, fileSigner: fileSigner
            ) {
                if passwordSigner == nil {
                    passwordSigner = .some(
                        password.flatMap { password in
                            manifest.proofSalt.flatMap(FileDigest.bytes(hex:)).map { ProofSigner(password: password, salt: $0) }
                        })
                }
                return passwordSigner ?? nil
            }
        }
        return verdicts
    }

    private static func verdict(
        _ proof: Manifest.DatabaseProof?, file: Manifest.File?, checkAnyway: Bool, fileSigner: ProofSigner?,
        passwordSigner: () -> ProofSigner?
    ) -> DatabaseVerdict {
        if checkAnyway { return .checked(reason: "asked to check every database") }
        guard let proof else { return .checked(reason: "the backup holds no proof for it") }
        guard proof.check == integrityCheck else { return .checked(reason: "its proof is of an unknown kind (\(proof.check))") }
        guard let file, proof.sha256.lowercased() == file.sha256?.lowercased(), proof.size == file.size else {
            return .checked(reason: "its proof is for other bytes (another SHA-256 or size)")
        }
        switch proof.key {
        case ProofSigner.keyFileKind:
            guard let fileSigner else {
                return .checked(reason: "no proof key on this machine (the proof was made with key \(proof.keyId ?? "?"))")
            }
            guard proof.keyId == nil || proof.keyId == fileSigner.keyId else {
                return .checked(
                    reason:
                        "its proof was made with another proof key (\(proof.keyId ?? "?"); this machine's is \(fileSigner.keyId ?? "?"))")
            }
            return fileSigner.authenticates(proof) ? .proven : .checked(reason: "its proof does not authenticate (forged or altered)")
        case ProofSigner.passwordKind:
            guard let signer = passwordSigner() else {
                return .checked(reason: "its proof is keyed by a password, and the backup was read without one")
            }
            return signer.authenticates(proof) ? .proven : .checked(reason: "its proof does not authenticate (forged or altered)")
        default:
            return .checked(reason: "its proof is keyed in an unknown way (\(proof.key))")
        }
    }
}

/// Whether a database of a backup needs `PRAGMA integrity_check` when it is read back.
enum DatabaseVerdict: Sendable, Equatable {
    /// A proof made with a trusted key covers its bytes: their SHA-256 is checked, the
    /// structure was checked at create.
    case proven
    /// Checked, for this reason (no proof, no key, a proof that does not authenticate…).
    case checked(reason: String)
}

/// How a backup being written proves its databases: by the password (with a new salt for the
/// manifest) when it is encrypted, else by the proof key; nil signer: no proofs.
struct DatabaseProofSettings: Sendable {
    let signer: ProofSigner?
    /// The manifest's `proofSalt` (password-keyed proofs only).
    let salt: String?

    init(password: BackupPassword?, proofKey: ProofKey?) {
        if let password {
            let salt = DatabaseProofs.newSalt()
            self.salt = salt
            signer = FileDigest.bytes(hex: salt).map { ProofSigner(password: password, salt: $0) }
        } else {
            salt = nil
            signer = proofKey.map(ProofSigner.init(proofKey:))
        }
    }
}
