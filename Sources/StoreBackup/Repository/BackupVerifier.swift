import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The outcome of checking one backup.
public struct VerificationResult: Sendable, Codable, Equatable {
    /// The backup checked.
    public var name: String
    /// Whether every check passed.
    public var ok: Bool
    /// What is wrong, when something is.
    public var problem: String?
    /// Entries checked.
    public var files: Int
    /// Databases that passed: checked with `PRAGMA integrity_check`, or proven (a trusted proof
    /// covers their bytes, whose SHA-256 was checked).
    public var databases: Int
    /// What could not be checked (a backup without a manifest, let through by
    /// ``ExtractionOptions/allowUnverified``); nil when everything was.
    public var warning: String? = nil
    /// Databases that fail `PRAGMA integrity_check` while matching the backup's checksum:
    /// already damaged in the live store when the backup was made. Such a backup is not ok
    /// (it restores only with ``ExtractionOptions/acceptDamagedDatabases``); nil when there are none.
    public var damagedDatabases: [String]? = nil
    /// What would let the backup through, when the failure has a remedy (``problem`` ends
    /// with it in the library's words).
    public var remedy: Remedy? = nil
    /// The databases whose `integrity_check` was skipped because a trusted proof covers their
    /// bytes; nil when none was.
    public var provenDatabases: [String]? = nil
    /// Why each database that ran `integrity_check` was not trusted on its proof, by path; nil
    /// when none ran it.
    public var checkReasons: [String: String]? = nil

    /// The result with what each database's verdict says.
    func judged(_ verdicts: [String: DatabaseVerdict]) -> VerificationResult {
        var result = self
        let proven = verdicts.filter { $0.value == .proven }.keys.sorted()
        let reasons = verdicts.compactMapValues { verdict -> String? in
            if case .checked(let reason) = verdict { return reason }
            return nil
        }
        result.provenDatabases = proven.isEmpty ? nil : proven
        result.checkReasons = reasons.isEmpty ? nil : reasons
        return result
    }
}

/// Which backups ``BackupRepository/verify(_:options:metadataOnly:progress:)`` checks.
public enum BackupSelection: Sendable {
    /// The backup with this name.
    case named(String)
    /// The newest backup.
    case latest
    /// Every backup in the destination, newest first.
    case all
}

/// Checks backups without touching any live store: downloads each to a temporary place,
/// reads the whole archive (CRCs), compares every file with its manifest checksum, and runs
/// `PRAGMA integrity_check` on each database in a scratch folder, which is removed after.
struct BackupVerifier: Sendable {
    typealias Selection = BackupSelection

    /// Where the backups are.
    let destination: any BackupDestination
    /// For encrypted backups: asked when one is met; a wrong or missing password is that backup's fault.
    var passwords: PasswordProvider?
    /// What may be let through. A backup without a manifest is checked as far as it can be
    /// (CRCs, databases) and called ok with a ``VerificationResult/warning`` only with
    /// ``ExtractionOptions/allowUnverified``; links recorded as pointing outside the store
    /// fail the backup, naming the option, without ``ExtractionOptions/allowOutsideLinks``.
    /// Damage at the source always fails the backup (it is named, with its remedy).
    var options = ExtractionOptions()
    /// Check only the metadata (see ``verifyMetadata(_:)``): no file content is read.
    var metadataOnly = false

    /// A verifier for the backups in `destination`; `passwords` opens encrypted ones.
    init(destination: any BackupDestination, passwords: PasswordProvider? = nil) {
        self.destination = destination
        self.passwords = passwords
    }

    /// Checks the selected backups one after another; a damaged backup is a result with
    /// `ok == false`, not an error. Throws when the selection cannot be resolved.
    func verify(_ selection: Selection, progress: ProgressHandler? = nil) async throws -> [VerificationResult] {
        let backups: [BackupListing]
        switch selection {
        case .named(let name): backups = [try await destination.resolve(name)]
        case .latest: backups = [try await destination.resolve("latest")]
        case .all:
            backups = try await destination.sortedBackups()
            if backups.isEmpty { throw StoreBackupError.noBackups(destination: destination.displayName) }
        }
        var results: [VerificationResult] = []
        for backup in backups {
            // The library's one error type, also for cancellation.
            if Task.isCancelled { throw StoreBackupError.cancelled }
            results.append(metadataOnly ? await verifyMetadata(backup) : await verifyOne(backup.name, progress: progress))
        }
        return results
    }

    /// An incremental backup: its whole chain fetched and checked link by link, then built
    /// in the scratch folder as restore builds it (every file's final SHA-256, every database's
    /// `integrity_check`).
    private func verifyChain(_ newest: ChainLink, scratch: String, progress: ProgressHandler?) async throws -> VerificationResult {
        let chain = try await StagedChain.fetch(
            newest: newest, destination: destination, passwords: passwords, downloadingInto: scratch, progress: progress)
        defer { chain.removeDownloads() }
        let throttle = ProgressThrottle(progress)
        var options = self.options
        options.acceptDamagedDatabases = true
        let name = newest.name
        return try await runBlocking(name: "storebackup-verify") { [options] cancel in
            // The newest link is the backup verified: every CRC of its archive, its own entries too.
            try newest.reader.checkOwnEntries(cancel: cancel)
            var applier = ChainApplier(chain: chain, cancel: cancel, progress: throttle)
            applier.options = options
            let databases = try applier.build(into: scratch + "/store")
            let files = newest.manifest?.files.count ?? 0
            let damaged = applier.damagedDatabases.current
            let verdicts = applier.databaseVerdicts.current
            if let first = damaged.keys.sorted().first {
                let error = StoreBackupError.databaseDamagedAtSource(name: name, databases: damaged.keys.sorted(), result: damaged[first]!)
                return VerificationResult(
                    name: name, ok: false, problem: error.description, files: files,
                    databases: databases.count - damaged.count, damagedDatabases: damaged.keys.sorted()
                ).judged(verdicts)
            }
            return VerificationResult(name: name, ok: true, problem: nil, files: files, databases: databases.count).judged(verdicts)
        }
    }

    private func verifyOne(_ name: String, progress: ProgressHandler?) async -> VerificationResult {
        // Under the one scratch policy, so the next command removes it if this one is killed.
        ScratchFiles.sweep(ScratchFiles.temporaryDirectory)
        let scratch = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "verify")
        defer { try? FileSystem.removeTree(scratch) }
        do {
            try FileSystem.createDirectories(scratch, mode: 0o700)
            var archive = destination.localPath(of: name)
            if archive == nil {
                let target = scratch + "/archive.zip"
                try await destination.download(name, to: target, progress: progress)
                archive = target
            }
            let path = archive!
            let throttle = ProgressThrottle(progress)
            let passwords = self.passwords
            let options = self.options
            let reader = try await StagedChain.open(path, name: name, passwords: passwords)
            if reader.manifest?.isIncremental == true {
                let newest = ChainLink(name: name, path: path, downloaded: false, reader: reader)
                return try await verifyChain(newest, scratch: scratch, progress: progress)
            }
            return try await runBlocking(name: "storebackup-verify") { cancel in
                let reading = VerifyReading(
                    reader: reader, allowed: options, cancel: cancel, progress: throttle)
                // Every database checked, to name all the damaged ones, then the backup fails.
                let databases = try reading.read(into: scratch + "/store")
                let damaged = reading.damagedDatabases.current
                let verdicts = reading.databaseVerdicts.current
                if let first = damaged.keys.sorted().first {
                    let error = StoreBackupError.databaseDamagedAtSource(
                        name: name, databases: damaged.keys.sorted(), result: damaged[first]!)
                    return VerificationResult(
                        name: name, ok: false, problem: error.description, files: reader.entries.count,
                        databases: databases.count - damaged.count, damagedDatabases: damaged.keys.sorted()
                    ).judged(verdicts)
                }
                return VerificationResult(
                    name: name, ok: true, problem: nil, files: reader.entries.count, databases: databases.count,
                    warning: reader.manifest == nil ? ExtractionPlan.unverifiedWarning : nil
                ).judged(verdicts)
            }
        } catch {
            let text = (error as? StoreBackupError)?.description ?? "\(error)"
            return VerificationResult(
                name: name, ok: false, problem: text, files: 0, databases: 0,
                remedy: (error as? StoreBackupError)?.remedy)
        }
    }
}
