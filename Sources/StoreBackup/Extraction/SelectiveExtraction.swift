/// Extract's unpacking of a full backup: the selected entries (and the folders on their
/// way) written into a new folder with every check of a restore, the checks before writing
/// still covering the whole archive, and the folder made durable. A database damaged before
/// the backup comes out as it was, listed for a warning: extract takes files out to look
/// at them (restore refuses such a database unless asked).
struct SelectiveExtraction {
    let reader: ArchiveReader
    let selection: EntrySelection
    /// What the person allowed; ``ExtractionOptions/acceptDamagedDatabases`` is extract's own (see ``options``).
    let allowed: ExtractionOptions
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// The databases found damaged at the source (relative path: SQLite's answer).
    let damagedDatabases = Locked<[String: String]>([:])
    /// Each database judged: proven (its `integrity_check` skipped) or checked, and why.
    let databaseVerdicts = Locked<[String: DatabaseVerdict]>([:])

    /// Extract takes files out to look at: a database damaged before the backup
    /// comes out as it was, with a warning (restore refuses it unless asked).
    private var options: ExtractionOptions {
        var options = allowed
        options.acceptDamagedDatabases = true
        return options
    }

    /// Extracts into `target`, which must not exist yet. Returns the databases checked.
    func extract(into target: String) throws -> [String] {
        let plan = try ExtractionPlan(reader: reader, incremental: false, options: options)
        let files = EntryList(reader.entries) { $0.kind == .file && selection.needs($0.path) }
        try plan.checkFreeSpace(writing: files, into: target)
        let root = try ConfinedTree(creating: target)
        let tree = TreeEntries(
            directories: reader.entries.filter { $0.kind == .directory && selection.needs($0.path) },
            fifos: reader.entries.filter { $0.kind == .fifo && selection.needs($0.path) },
            links: plan.links.filter { selection.needs($0.entry.path) })
        let unpacking = ParallelUnpacking(
            writer: EntryWriter(
                plan: plan, root: root, cancel: cancel, kept: .all, fileWritten: { TestPausePoint.reach("extract-file-written") }),
            judge: DamageJudge(
                reader: reader, accept: true, found: damagedDatabases, options: options, judged: databaseVerdicts), progress: progress)
        try unpacking.run(files, tree: tree, durable: true)
        guard let manifest = reader.manifest else {
            return try UnlistedDatabases.findAndCheck(
                in: target, among: files, workers: unpacking.writer.workers, cancel: cancel, progress: progress)
        }
        return manifest.databases.map(\.path).filter { selection.needs($0) }
    }
}
