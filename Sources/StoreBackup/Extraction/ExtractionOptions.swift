/// What a person allows an extraction to let through. Restore takes all three as given;
/// the other drivers fix some as their own policy (verify and extract always accept a
/// database damaged at the source, a chain needs its manifests).
struct ExtractionOptions: Sendable {
    /// Accept an archive without a manifest (checking only CRCs and databases).
    var allowUnverified = false
    /// Make the links the manifest records as pointing outside the store (create warned
    /// about them); without it they are refused, naming the option. Links the manifest
    /// does not record are refused either way.
    var allowOutsideLinks = false
    /// Let a database through that fails `PRAGMA integrity_check` although it matches its
    /// manifest checksum (damaged in the live store before the backup, see
    /// ``StoreBackupError/databaseDamagedAtSource(name:databases:result:)``); each is listed
    /// in the driver's `damagedDatabases`. Off: the first such database ends the extraction
    /// with that error.
    var acceptDamagedDatabases = false
}
