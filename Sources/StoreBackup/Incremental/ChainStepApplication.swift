/// One backup of a chain applied by ``ChainApplier``: the chain's full unpacked into a new
/// folder, or an incremental unpacked into the tree its base left (the applier removed what
/// this backup replaces; the files its manifest marks with a `source` have no entry here).
/// Every check of a restore is made; databases a later backup changes wait for their
/// `integrity_check`, and databases rebuilt in one pass are patched as they are unpacked.
struct ChainStepApplication {
    enum Step {
        /// The chain's full backup, into a folder that must not exist yet.
        case full
        /// An incremental, onto the tree as the backup before it left it.
        case incremental
    }

    let reader: ArchiveReader
    let step: Step
    /// Databases whose `PRAGMA integrity_check` waits for their final content: a later backup
    /// of the chain patches, replaces or removes them (their SHA-256 is still checked here).
    /// The check is the longest step of a restore; a chain makes it once per database.
    let deferredChecks: Set<String>
    /// Databases changed while they are unpacked (a chain's page deltas, ``DatabasePatch``),
    /// by path: checked (SHA-256 and `integrity_check`) as the patch leaves them.
    let patches: [String: any DatabasePatch]
    /// The newest manifest's verdicts on the ``patches``' databases: their proofs are of the
    /// content the patches leave, not of this backup's.
    var patchedVerdicts: [String: DatabaseVerdict] = [:]
    /// Start making what this step writes durable while it unpacks (``ParallelUnpacking``:
    /// databases fsynced as written, the other files synced in passes), so that the sync
    /// after the last step has only the later steps' changes left to write.
    var durable = false
    /// Write only the paths this accepts (`extract` of a few files); nil writes every entry.
    /// The checks before writing still cover the whole archive.
    let selection: (@Sendable (String) -> Bool)?
    /// See ``ExtractionOptions``; a chain is never read without its manifests.
    let options: ExtractionOptions
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// The databases found damaged at the source (relative path: SQLite's answer).
    let damagedDatabases = Locked<[String: String]>([:])
    /// Each database judged: proven (its `integrity_check` skipped) or checked, and why.
    let databaseVerdicts = Locked<[String: DatabaseVerdict]>([:])

    /// Unpacks the backup into `target`. Returns the selected databases it stores whole,
    /// each checked unless its check was deferred.
    @discardableResult
    func apply(into target: String) throws -> [String] {
        let incremental = step == .incremental
        var options = self.options
        options.allowUnverified = false
        let plan = try ExtractionPlan(reader: reader, incremental: incremental, options: options)
        let files = EntryList(reader.entries) { $0.kind == .file && isSelected($0.path) }
        try plan.checkFreeSpace(writing: files, into: target)
        let root = try incremental ? ConfinedTree(opening: target) : ConfinedTree(creating: target)
        let tree = TreeEntries(
            directories: reader.entries.filter { $0.kind == .directory && isSelected($0.path) },
            fifos: reader.entries.filter { $0.kind == .fifo && isSelected($0.path) },
            links: plan.links.filter { isSelected($0.entry.path) })
        var judge = DamageJudge(
            reader: reader, accept: options.acceptDamagedDatabases, found: damagedDatabases, options: options, judged: databaseVerdicts)
        for path in patches.keys {
            judge.verdicts[path] = patchedVerdicts[path] ?? .checked(reason: "the chain's newest backup holds no proof for it")
        }
        var unpacking = ParallelUnpacking(
            writer: EntryWriter(plan: plan, root: root, cancel: cancel, kept: .all), judge: judge, progress: progress)
        unpacking.deferredChecks = deferredChecks
        unpacking.patches = patches
        try unpacking.run(files, tree: tree, durable: durable)
        // In an incremental, only the databases stored whole here were unpacked (and checked).
        let unpacked = incremental ? Set(files.map(\.path)) : nil
        return (reader.manifest?.databases ?? []).map(\.path).filter { path in isSelected(path) && (unpacked?.contains(path) ?? true) }
    }

    private func isSelected(_ path: String) -> Bool { selection?(path) ?? true }
}
