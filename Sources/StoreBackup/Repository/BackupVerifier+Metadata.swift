import Foundation

extension BackupVerifier {
    /// What a metadata-only check leaves unchecked, said in its result.
    static let metadataOnlyWarning =
        "metadata only: the central directory, the manifest, their agreement and the links were checked; no file content, CRC or database was read"

    /// What a metadata-only check of an incremental also leaves unchecked.
    static let chainNotCheckedWarning = "an incremental: its chain (the backups it applies to) was not read"

    /// `verify --metadata-only`: opens the backup with every check of a full verify's first
    /// step (limits, names, the password on the manifest's verifier) and checks that the
    /// central directory and the manifest agree (every file in both, same kind and size) and
    /// that every link stays inside the store, without reading any file's content. A remote
    /// backup is read in ranges where its destination serves them, so the check transfers
    /// its central directory, manifest and links only.
    func verifyMetadata(_ backup: BackupListing) async -> VerificationResult {
        let name = backup.name
        ScratchFiles.sweep(ScratchFiles.temporaryDirectory)
        let scratch = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "verify")
        defer { try? FileSystem.removeTree(scratch) }
        do {
            try FileSystem.createDirectories(scratch, mode: 0o700)
            let check: (BrowsedArchive) async throws -> VerificationResult = { archive in
                try await checkMetadata(archive, name: name, scratch: scratch)
            }
            if let local = destination.localPath(of: name) { return try await check(.file(local)) }
            if let result = try await RemoteArchive.withRangedReads(of: backup, in: destination, check) { return result }
            let target = scratch + "/archive.zip"
            try await destination.download(name, to: target, progress: nil)
            return try await check(.file(target))
        } catch {
            let text = (error as? StoreBackupError)?.description ?? "\(error)"
            return VerificationResult(
                name: name, ok: false, problem: text, files: 0, databases: 0, remedy: (error as? StoreBackupError)?.remedy)
        }
    }

    private func checkMetadata(_ archive: BrowsedArchive, name: String, scratch: String) async throws -> VerificationResult {
        let passwords = self.passwords, options = self.options
        return try await runBlocking(name: "storebackup-verify") { cancel in
            let reader = try archive.reader(backupName: name, passwords: passwords, cancel: cancel)
            try reader.prefetch(reader.entries.filter { $0.kind == .symlink })
            let reading = VerifyReading(
                reader: reader, allowed: options, cancel: cancel, progress: ProgressThrottle(nil))
            try reading.checkMetadata(beside: scratch + "/store")
            let incremental = reader.manifest?.isIncremental == true
            let warning = [
                reader.manifest == nil ? ExtractionPlan.unverifiedWarning : nil, Self.metadataOnlyWarning,
                incremental ? Self.chainNotCheckedWarning : nil,
            ].compactMap { $0 }
            return VerificationResult(
                name: name, ok: true, problem: nil, files: reader.entries.count, databases: 0, warning: warning.joined(separator: "; "))
        }
    }
}
