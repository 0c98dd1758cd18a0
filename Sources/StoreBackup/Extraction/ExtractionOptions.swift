/// What a person allows when a backup is read back: by ``StoreHelper/restore(_:options:hooks:progress:)``
/// (inside ``RestoreOptions``), and by ``BackupRepository``'s verify and extract. Everything is off
/// by default: such backups are refused, each with an error that names the option.
///
/// Restore takes all three as given; verify and extract accept a database damaged at the
/// source by their own policy (they read backups to look at them), and a chain is never read
/// without its manifests.
public struct ExtractionOptions: Sendable, Equatable {
    /// Accept a backup without a manifest (made by hand or by another tool), checking only
    /// CRCs and `PRAGMA integrity_check`.
    public var allowUnverified = false
    /// Make the links the manifest records as pointing outside the stores directory, such as
    /// `shared -> /srv/shared/config.json`, exactly as they were (create warned about each).
    /// Without it they are refused, naming the option; links the manifest does not record are
    /// refused either way.
    public var allowOutsideLinks = false
    /// Let a database through that fails `PRAGMA integrity_check` although it matches the
    /// SHA-256 the backup recorded: it was already damaged in the live store when the backup
    /// was made (see ``StoreBackupError/databaseDamagedAtSource(name:databases:result:)``), and
    /// comes back exactly as it was then, listed in ``RestoreResult/damagedDatabases``. Off: the
    /// first such database ends the restore with that error.
    public var acceptDamagedDatabases = false
    /// The key that authenticates the database proofs of unencrypted backups (those of
    /// encrypted backups are keyed by their password). A database whose proof authenticates
    /// has its bytes checked against its SHA-256 as always, but skips `PRAGMA
    /// integrity_check`, which create already ran on the same bytes. Nil: such proofs cannot
    /// be trusted, and the databases are checked.
    public var proofKey: ProofKey? = nil
    /// Run `PRAGMA integrity_check` on every database, proven or not.
    public var checkDatabases = false

    /// Options with everything off, or as given.
    public init(
        allowUnverified: Bool = false, allowOutsideLinks: Bool = false, acceptDamagedDatabases: Bool = false,
        proofKey: ProofKey? = nil, checkDatabases: Bool = false
    ) {
        self.allowUnverified = allowUnverified
        self.allowOutsideLinks = allowOutsideLinks
        self.acceptDamagedDatabases = acceptDamagedDatabases
        self.proofKey = proofKey
        self.checkDatabases = checkDatabases
    }
}
