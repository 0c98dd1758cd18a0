/// Verify's reading of a full backup: every file read and checked as restore checks it, but
/// only the databases written (into a scratch folder: they must exist on disk for `PRAGMA
/// integrity_check`); other files are hashed as they are read, and links are not created.
/// Every database is checked, so that all the damaged ones are named; the caller then fails
/// the backup.
struct VerifyReading {
    let reader: ArchiveReader
    /// Accept an archive without a manifest (checking only CRCs and databases).
    let allowUnverified: Bool
    /// See ``ExtractionOptions/allowOutsideLinks``.
    let allowOutsideLinks: Bool
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// The databases found damaged at the source (relative path: SQLite's answer).
    let damagedDatabases = Locked<[String: String]>([:])

    /// Reads the whole backup, writing its databases into `scratch` (which must not exist
    /// yet). Returns the databases checked.
    func read(into scratch: String) throws -> [String] {
        var extractor = Extractor(reader: reader, cancel: cancel, progress: progress)
        extractor.verifyOnly = true
        extractor.allowUnverified = allowUnverified
        // Every database checked, to name all the damaged ones, then the backup fails.
        extractor.acceptDamagedDatabases = true
        extractor.allowOutsideLinks = allowOutsideLinks
        let databases = try extractor.extract(into: scratch)
        let damaged = extractor.damagedDatabases.current
        damagedDatabases.withLock { $0 = damaged }
        return databases
    }

    /// `verify --metadata-only`: the checks made before anything is written (the manifest
    /// against the central directory, the links, the tree, the space), reading no file.
    /// An incremental's own metadata is checked as a step of its chain would be; its bases
    /// are not read.
    func checkMetadata(beside scratch: String) throws {
        // Extract with nothing selected: the cross-checks, the links and the tree, no file.
        var extractor = Extractor(reader: reader, cancel: cancel, progress: progress)
        extractor.verifyOnly = true
        extractor.allowUnverified = allowUnverified
        extractor.allowOutsideLinks = allowOutsideLinks
        extractor.selection = { _ in false }
        // An incremental's own metadata is checked as a step of its chain would be (into
        // an existing folder); its bases are not read.
        let incremental = reader.manifest?.isIncremental == true
        extractor.applyingIncremental = incremental
        if incremental { try FileSystem.createDirectories(scratch, mode: 0o700) }
        try extractor.extract(into: scratch)
    }
}
