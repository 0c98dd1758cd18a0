/// Restore's unpacking of a full backup into a new folder (`Stores_New`): every entry
/// written, every check of ``Extractor`` made, and the tree made durable (one `syncfs`)
/// while the databases' checks still run, so that the disk's work and the longest check
/// overlap. A chain is built by ``ChainStepApplication`` instead.
struct RestoreUnpacking {
    let reader: ArchiveReader
    let options: ExtractionOptions
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// How many databases may wait for their read-back SHA-256 at once (a test lowers it).
    var pendingDigestLimit = 32
    /// The databases found damaged at the source (relative path: SQLite's answer), restored
    /// because ``ExtractionOptions/acceptDamagedDatabases`` let them through.
    let damagedDatabases = Locked<[String: String]>([:])

    /// Unpacks into `target`, which must not exist yet. Returns the databases checked.
    @discardableResult
    func unpack(into target: String) throws -> [String] {
        var extractor = Extractor(reader: reader, cancel: cancel, progress: progress)
        extractor.allowUnverified = options.allowUnverified
        extractor.acceptDamagedDatabases = options.acceptDamagedDatabases
        extractor.allowOutsideLinks = options.allowOutsideLinks
        extractor.pendingDigestLimit = pendingDigestLimit
        // Every unpacked file and folder reaches the disk before the journal says
        // "swapping"; the sync runs while the databases are still being checked.
        extractor.syncTree = { try TreeSync.sync($0) }
        let databases = try extractor.extract(into: target)
        let damaged = extractor.damagedDatabases.current
        damagedDatabases.withLock { $0 = damaged }
        return databases
    }
}
