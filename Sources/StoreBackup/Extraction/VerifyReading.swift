/// Verify's reading of a full backup: every file read and checked as restore checks it, but
/// only the databases written (into a scratch folder: they must exist on disk for `PRAGMA
/// integrity_check`); other files are hashed as they are read, and neither links nor FIFOs
/// are made. Every database is checked, so that all the damaged ones are named; the caller
/// then fails the backup.
struct VerifyReading {
    let reader: ArchiveReader
    /// What the person allowed; ``ExtractionOptions/acceptDamagedDatabases`` is verify's own (see ``options``).
    let allowed: ExtractionOptions
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// The databases found damaged at the source (relative path: SQLite's answer).
    let damagedDatabases = Locked<[String: String]>([:])
    /// Each database judged: proven (its `integrity_check` skipped) or checked, and why.
    let databaseVerdicts = Locked<[String: DatabaseVerdict]>([:])

    /// Every database checked, to name all the damaged ones, then the backup fails.
    private var options: ExtractionOptions {
        var options = allowed
        options.acceptDamagedDatabases = true
        return options
    }

    /// Reads the whole backup, writing its databases into `scratch` (which must not exist
    /// yet). Returns the databases checked.
    func read(into scratch: String) throws -> [String] {
        let plan = try ExtractionPlan(reader: reader, incremental: false, options: options)
        let files = EntryList(reader.entries) { $0.kind == .file }
        // Without a manifest, any file may turn out to be a database.
        let kept: EntryWriter.KeptFiles = reader.manifest == nil ? .databasesByHeader : .databases
        try plan.checkFreeSpace(writing: kept == .databases ? files.keeping(plan.isDatabase) : files, into: scratch)
        let root = try ConfinedTree(creating: scratch)
        let tree = TreeEntries(directories: reader.entries.filter { $0.kind == .directory }, fifos: [], links: [])
        let unpacking = ParallelUnpacking(
            writer: EntryWriter(plan: plan, root: root, cancel: cancel, kept: kept),
            judge: DamageJudge(
                reader: reader, accept: true, found: damagedDatabases, options: options, judged: databaseVerdicts), progress: progress)
        try unpacking.run(files, tree: tree, durable: false)
        try reader.checkOwnEntries(cancel: cancel)
        guard let manifest = reader.manifest else {
            return try UnlistedDatabases.findAndCheck(
                in: scratch, among: files, workers: unpacking.writer.workers, cancel: cancel, progress: progress)
        }
        return manifest.databases.map(\.path)
    }

    /// `verify --metadata-only`: the checks made before anything is written (the manifest
    /// against the central directory, the links and the tree) and the free space a folder
    /// of the backup's entries needs beside `scratch`; no file is read or written. An
    /// incremental's own metadata is checked as a step of its chain would be; its bases are
    /// not read.
    func checkMetadata(beside scratch: String) throws {
        let plan = try ExtractionPlan(reader: reader, incremental: reader.manifest?.isIncremental == true, options: options)
        try plan.checkFreeSpace(writing: [ArchiveEntry](), into: scratch)
    }
}
