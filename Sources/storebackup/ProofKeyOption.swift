import ArgumentParser
import Foundation
import StoreBackup

/// `--proof-key FILE`: the key that authenticates unencrypted backups' database proofs
/// (docs/FORMAT.md, "Database proofs"; docs/trust-model.md).
struct ProofKeyOption: ParsableArguments {
    @Option(
        name: .customLong("proof-key"),
        help: ArgumentHelp(
            "The proof key file (default $STOREBACKUP_PROOF_KEY_FILE or ~/.config/storebackup/proof.key). Create makes it when missing (mode 0600); keep a copy off-site with your passwords. Restore and verify trust a database's proof only with the key that made it.",
            valueName: "file"))
    var path: String?

    var effectivePath: String { path ?? ProofKey.defaultPath() }

    /// Create's key: read, or made when missing. A key named by --proof-key that cannot be
    /// used ends the command; the default one only costs the proofs (the backup matters more).
    func keyForCreate() -> ProofKey? {
        do { return try ProofKey.loadOrCreate(at: effectivePath) } catch {
            if path != nil { Terminal.fail(error) }
            Terminal.info("storebackup: warning: \(ErrorAdvice.describe(error)); the backup's databases get no proofs")
            return nil
        }
    }

    /// A reader's key: nil when there is none (databases are then checked). A key named by
    /// --proof-key that cannot be used ends the command; the default one is passed over.
    func keyForReading() -> ProofKey? {
        guard path != nil || FileManager.default.fileExists(atPath: effectivePath) else { return nil }
        do { return try ProofKey(contentsOfFile: effectivePath) } catch {
            if path != nil { Terminal.fail(error) }
            Terminal.info("storebackup: warning: \(ErrorAdvice.describe(error)); databases are checked without their proofs")
            return nil
        }
    }
}
