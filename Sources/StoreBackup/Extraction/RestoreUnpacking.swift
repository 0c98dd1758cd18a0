/// Restore's unpacking of a full backup into a new folder (`Stores_New`): every entry
/// written with every check (``ExtractionPlan``, ``EntryWriter``, ``IntegrityCheck``), and the
/// tree made durable (one `syncfs`) while the databases' checks still run, so that the disk's
/// work and the longest check overlap. A chain is built by ``ChainStepApplication`` instead.
struct RestoreUnpacking {
    let reader: ArchiveReader
    let options: ExtractionOptions
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// See ``ParallelUnpacking/pendingDigestLimit`` (a test lowers it).
    var pendingDigestLimit = ParallelUnpacking.defaultPendingDigestLimit
    /// The databases found damaged at the source (relative path: SQLite's answer), restored
    /// because ``ExtractionOptions/acceptDamagedDatabases`` let them through.
    let damagedDatabases = Locked<[String: String]>([:])
    /// Each database judged: proven (its `integrity_check` skipped) or checked, and why.
    let databaseVerdicts = Locked<[String: DatabaseVerdict]>([:])

    /// Unpacks into `target`, which must not exist yet. Returns the databases checked.
    @discardableResult
    func unpack(into target: String) throws -> [String] {
        let plan = try ExtractionPlan(reader: reader, incremental: false, options: options)
        let files = EntryList(reader.entries) { $0.kind == .file }
        try plan.checkFreeSpace(writing: files, into: target)
        let root = try ConfinedTree(creating: target)
        let tree = TreeEntries(
            directories: reader.entries.filter { $0.kind == .directory }, fifos: reader.entries.filter { $0.kind == .fifo },
            links: plan.links)
        var unpacking = ParallelUnpacking(
            writer: EntryWriter(plan: plan, root: root, cancel: cancel, kept: .all),
            judge: DamageJudge(
                reader: reader, accept: options.acceptDamagedDatabases, found: damagedDatabases, options: options, judged: databaseVerdicts),
            progress: progress)
        unpacking.pendingDigestLimit = pendingDigestLimit
        // Every unpacked file and folder reaches the disk before the journal says
        // "swapping"; the sync runs while the databases are still being checked.
        try unpacking.run(files, tree: tree, durable: true)
        guard let manifest = reader.manifest else {
            return try UnlistedDatabases.findAndCheck(
                in: target, among: files, workers: unpacking.writer.workers, cancel: cancel, progress: progress)
        }
        return manifest.databases.map(\.path)
    }
}
