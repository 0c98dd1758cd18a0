/// Extract's unpacking of a full backup: the selected entries (and the folders on their
/// way) written into a new folder with every check of a restore, the checks before writing
/// still covering the whole archive, and the folder made durable. A database damaged before
/// the backup comes out as it was, listed for a warning: extract takes files out to look
/// at them (restore refuses such a database unless asked).
struct SelectiveExtraction {
    let reader: ArchiveReader
    let selection: EntrySelection
    /// Accept an archive without a manifest (checking only CRCs and databases).
    let allowUnverified: Bool
    /// See ``ExtractionOptions/allowOutsideLinks``.
    let allowOutsideLinks: Bool
    let cancel: CancellationFlag
    let progress: ProgressThrottle
    /// The databases found damaged at the source (relative path: SQLite's answer).
    let damagedDatabases = Locked<[String: String]>([:])

    /// Extracts into `target`, which must not exist yet. Returns the databases checked.
    func extract(into target: String) throws -> [String] {
        var extractor = Extractor(reader: reader, cancel: cancel, progress: progress)
        extractor.allowUnverified = allowUnverified
        // Extract takes files out to look at: a database damaged before the backup
        // comes out as it was, with a warning (restore refuses it unless asked).
        extractor.acceptDamagedDatabases = true
        extractor.allowOutsideLinks = allowOutsideLinks
        let selection = self.selection
        extractor.selection = { selection.needs($0) }
        extractor.syncTree = { try TreeSync.sync($0) }
        extractor.fileWritten = { TestPausePoint.reach("extract-file-written") }
        let databases = try extractor.extract(into: target)
        let damaged = extractor.damagedDatabases.current
        damagedDatabases.withLock { $0 = damaged }
        return databases
    }
}
