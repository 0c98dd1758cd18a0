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

    /// Options with everything off, or as given.
    public init(allowUnverified: Bool = false, allowOutsideLinks: Bool = false, acceptDamagedDatabases: Bool = false) {
        self.allowUnverified = allowUnverified
        self.allowOutsideLinks = allowOutsideLinks
        self.acceptDamagedDatabases = acceptDamagedDatabases
    }
}
