/// What would fix a failure, as a value: ``StoreBackupError/remedy`` names it and
/// ``StoreBackupError/description`` says it in the library's words; a front end (the
/// command line) says it in its own (a flag, a command to run).
public enum Remedy: String, Sendable, Equatable, CaseIterable, Codable, CustomStringConvertible {
    /// Look the exact name up in the destination's backups (``BackupRepository/list()``).
    case listBackups
    /// Give the backup's password (``StoreHelper/passwords``).
    case givePassword
    /// Allow a backup without a manifest, checked only by CRC and database checks
    /// (``ExtractionOptions/allowUnverified``).
    case allowUnverified
    /// Restore the backup although its databases were already damaged when it was made
    /// (``ExtractionOptions/acceptDamagedDatabases``).
    case acceptDamagedDatabases
    /// Use a newer storebackup: the backup's format is newer than this version reads.
    case upgradeStoreBackup
    /// Run recovery on the store (``StoreHelper/recover(appCommands:)``).
    case recoverStore
    /// The server's certificate is signed by a certificate authority of one's own: trust that
    /// CA's PEM file (``TransportOptions/caFile``).
    case trustCertificateAuthority
    /// Authorize the Dropbox app again (``DropboxAuthorization``), storing a new refresh token.
    case authorizeDropbox
    /// Check the Dropbox app key (the one given to ``DropboxAuthorization``).
    case checkDropboxAppKey
    /// Name the S3-compatible server as the endpoint (``DestinationOptions/s3Endpoint``).
    case giveS3Endpoint
    /// Name the SSH private key to use (``DestinationOptions/sshKey``).
    case giveSSHKey
    /// Stop the processes that have the store open, or let the restore stop and start the
    /// app (``RestoreOptions/appCommands``).
    case stopStoreUsers
    /// The in-use check could not see every process: run with more privileges, or restore
    /// anyway (``RestoreOptions/allowStoreInUse``).
    case allowStoreInUse
    /// Make the links the backup recorded as pointing outside the store
    /// (``ExtractionOptions/allowOutsideLinks``).
    case allowOutsideLinks
    /// Delete the backup together with the incremental backups that depend on it, newest
    /// first (``BackupRepository/delete(_:withDependents:)``).
    case deleteDependents

    /// The advice in the library's words.
    public var description: String {
        switch self {
        case .listBackups: return "list the destination's backups for the exact name"
        case .givePassword: return "give its password"
        case .allowUnverified: return "allow unverified backups to restore it with only CRC and database checks"
        case .acceptDamagedDatabases: return "restore it anyway with acceptDamagedDatabases (the damaged databases come back as they were)"
        case .upgradeStoreBackup: return "upgrade storebackup"
        case .recoverStore: return "run recovery on it"
        case .trustCertificateAuthority: return "if it is signed by your own certificate authority, trust that CA's PEM file"
        case .authorizeDropbox: return "authorize the Dropbox app again"
        case .checkDropboxAppKey: return "check the Dropbox app key"
        case .giveS3Endpoint: return "give the server as the S3 endpoint"
        case .giveSSHKey: return "give the SSH private key to use"
        case .stopStoreUsers: return "stop it first, or have the restore stop and start the app"
        case .allowStoreInUse: return "run as root to see every process, or allow restoring a store in use"
        case .allowOutsideLinks:
            return "allow outside links to make the links it recorded as pointing outside (nothing is written through them)"
        case .deleteDependents: return "delete it with its dependents to remove them too, newest first"
        }
    }
}
