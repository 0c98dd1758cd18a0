import Foundation

/// Tells a database damaged before the backup from a damaged backup. Every database's bytes
/// are compared with the manifest's SHA-256, and a mismatch is the error reported even when
/// the check fails too (``ParallelUnpacking``). So a database of a backup with a manifest
/// that fails its check while the extraction goes on without a mismatch is one whose live
/// copy was already damaged: the backup kept it faithfully.
struct DamageJudge: Sendable {
    let backupName: String
    let hasManifest: Bool
    /// ``ExtractionOptions/acceptDamagedDatabases``.
    let accept: Bool
    /// The databases found damaged at the source so far: relative path and SQLite's answer.
    let found: Locked<[String: String]>
    /// Whether each database of the manifest is proven or checked (and why).
    var verdicts: [String: DatabaseVerdict]
    /// The verdicts of the databases judged so far, by relative path.
    let judged: Locked<[String: DatabaseVerdict]>

    /// Judges the databases of `reader`'s archive into `found` and `judged`; `options` says
    /// which proofs it may trust.
    init(
        reader: ArchiveReader, accept: Bool, found: Locked<[String: String]>, options: ExtractionOptions,
        judged: Locked<[String: DatabaseVerdict]>
    ) {
        self.backupName = reader.backupName
        self.hasManifest = reader.manifest != nil
        self.accept = accept
        self.found = found
        self.verdicts = DatabaseProofs.verdicts(
            manifest: reader.manifest, password: reader.password, proofKey: options.proofKey, checkAnyway: options.checkDatabases)
        self.judged = judged
    }

    /// Whether the database at `entryPath` skips `integrity_check` (a trusted proof covers it).
    func isProven(_ entryPath: String) -> Bool { verdicts[entryPath] == .proven }

    func check(_ check: IntegrityCheckJob) throws {
        if isProven(check.entryPath) {
            judged.withLock { $0[check.entryPath] = .proven }
            // Its bytes are checked against the proven SHA-256 before the swap, as every file's
            // are: the reload's quick check would read them again for nothing.
            if let unpacking = check.unpacking, !unpacking.waitUntilDone() { return }
            CheckedDatabases.record(check.path)
            return
        }
        judged.withLock { $0[check.entryPath] = verdicts[check.entryPath] ?? .checked(reason: "the backup has no manifest") }
        do {
            try IntegrityCheck.run(check.path, unpacking: check.unpacking)
        } catch let error as StoreBackupError where hasManifest && Self.isDamage(error) {
            let result = Self.sqliteAnswer(error)
            found.withLock { $0[check.entryPath] = result }
            guard accept else {
                throw StoreBackupError.databaseDamagedAtSource(name: backupName, databases: [check.entryPath], result: result)
            }
            // Taken as it is, by request: the reload's check need not refuse it again.
            if let unpacking = check.unpacking, !unpacking.waitUntilDone() { return }
            CheckedDatabases.record(check.path)
        }
    }

    /// A failed check, or SQLite calling the file malformed before the check could run.
    static func isDamage(_ error: StoreBackupError) -> Bool {
        if case .databaseCheckFailed = error { return true }
        return error.isSQLiteDamage
    }

    static func sqliteAnswer(_ error: StoreBackupError) -> String {
        switch error {
        case .databaseCheckFailed(_, let result): return result
        case .sqlite(_, _, let message): return message
        default: return error.summary
        }
    }
}
