import StoreBackup

/// The library says what failed and names a ``Remedy``; the command line says what to do in
/// its own terms (a flag, a command to run), keeping the one-line error as informative as the
/// library's words alone would not be.
enum ErrorAdvice {
    /// One line for `error`: the library's summary with the command-line advice for its remedy.
    static func describe(_ error: Error) -> String {
        guard let error = error as? StoreBackupError else { return "\(error)" }
        guard let remedy = error.remedy else { return error.summary }
        return error.summary + advice(remedy)
    }

    /// The advice, with the punctuation that joins it to the summary.
    static func advice(_ remedy: Remedy) -> String {
        switch remedy {
        case .listBackups: return " (see: storebackup list)"
        case .givePassword: return "; give its password with --password-file FILE, STOREBACKUP_PASSWORD, or at the prompt on a terminal"
        case .allowUnverified: return ". Pass --allow-unverified to restore it with only CRC and database checks"
        case .acceptDamagedDatabases: return "; to restore it anyway (the damaged databases as they were), pass --accept-damaged-databases"
        case .upgradeStoreBackup: return ": upgrade storebackup"
        case .recoverStore: return "; run `storebackup recover` on it"
        case .trustCertificateAuthority:
            return "; if it is signed by your own certificate authority, pass that CA's PEM file with --ca-file (or STOREBACKUP_CA_FILE)"
        case .authorizeDropbox: return "; to authorize the app, run `storebackup auth dropbox --app-key KEY`"
        case .checkDropboxAppKey: return "; check --app-key / STOREBACKUP_DROPBOX_APP_KEY"
        case .giveS3Endpoint: return "; give the server with --s3-endpoint"
        case .giveSSHKey: return "; pass the key with --ssh-key"
        case .stopStoreUsers: return "; stop it first, or use --stop-command/--start-command"
        case .allowStoreInUse: return "; run as root to see every process, or pass --force to restore anyway"
        case .allowOutsideLinks:
            return ". Pass --allow-outside-links to make the links it recorded as pointing outside (nothing is written through them)"
        case .deleteDependents: return "; pass --with-dependents to delete them too (newest first), or keep it"
        }
    }
}
