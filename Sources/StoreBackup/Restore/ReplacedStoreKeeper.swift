import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What becomes of the store a restore replaced, and of the kept one: kept as
/// `<store>_Replaced` at a restore's commit (renamed, never copied), dropped at the next
/// commit, when its time is up, or when an undo puts it back.
///
/// Nothing is removed in place: a folder first goes to a scratch name (one rename), then
/// is removed, so a crash never leaves a half-removed store under a name that recovery
/// would keep; the next command's sweep finishes the removal. Each step is safe to run
/// again after a crash part-way through: recovery of a `committing` journal calls it.
struct ReplacedStoreKeeper {
    let layout: StoreLayout

    /// What a commit did with the replaced store.
    struct Outcome: Sendable {
        /// The store kept for an undo; nil when none is.
        var kept: ReplacedStore?
        /// Why the replaced store was dropped although it was to be kept (disk space).
        var warning: String?
    }

    /// A restore committed: `_Old` (the store it replaced) is kept until `keepUntil`, or
    /// dropped when that is nil or the disk is too full; the earlier kept store goes
    /// either way, so what is kept is always what the last commit replaced.
    /// `hadLiveStore: false`: there was no `_Old`, and a `_Replaced` is the earlier one.
    func commitRestore(backupName: String, hadLiveStore: Bool, keepUntil: Date?, now: Date) throws -> Outcome {
        var discards: [String] = []
        defer { for path in discards { try? FileSystem.removeTree(path) } }
        guard FileSystem.fileExists(layout.old) else {
            // The rename into `_Replaced` was done (or there was nothing to keep): only the
            // record may be missing.
            guard hadLiveStore, let keepUntil, FileSystem.isDirectory(layout.replaced) else {
                discards += try dropKept()
                return Outcome()
            }
            return Outcome(kept: try writeRecord(backupName: backupName, replacedAt: now, keptUntil: keepUntil))
        }
        let earlierBytes = FileSystem.isDirectory(layout.replaced) ? (ReplacedStoreRecord.load(from: layout.replacedRecord)?.bytes ?? 0) : 0
        discards += try dropKept()
        guard let keepUntil else {
            discards.append(try setAside(layout.old, purpose: "replaced-store"))
            return Outcome()
        }
        let (free, total) = try FreeSpace.volume(of: layout.parent)
        if let refusal = KeepSpaceRule.refusal(
            free: free, total: total, liveBytes: FileSystem.treeSize(layout.live), earlierBytes: earlierBytes)
        {
            discards.append(try setAside(layout.old, purpose: "replaced-store"))
            return Outcome(warning: "the replaced store was not kept, so this restore cannot be undone: \(refusal)")
        }
        TestPausePoint.reach("keeping")
        try FileSystem.rename(from: layout.old, to: layout.replaced)
        try FileSystem.fsync(path: layout.parent)
        return Outcome(kept: try writeRecord(backupName: backupName, replacedAt: now, keptUntil: keepUntil))
    }

    /// An undo committed: the kept store is live, so its record goes, and so does `_Old`
    /// (the restored store it replaced).
    func commitUndo() throws {
        try removeRecord()
        guard FileSystem.fileExists(layout.old) else { return }
        try FileSystem.removeTree(try setAside(layout.old, purpose: "undone-restore"))
    }

    /// Removes the kept store once its time is up (and a record whose folder is gone).
    /// Returns what was removed, for the log; nil when nothing was.
    func removeExpired(now: Date) throws -> String? {
        let record = ReplacedStoreRecord.load(from: layout.replacedRecord)
        guard FileSystem.isDirectory(layout.replaced) else {
            if FileSystem.fileExists(layout.replacedRecord) { try removeRecord() }
            return nil
        }
        // Without a record the kept store's time is unknown: it stays until removed by hand.
        guard let record, record.keptUntil <= now else { return nil }
        for path in try dropKept() { try FileSystem.removeTree(path) }
        return "the store replaced by the restore of \"\(record.backupName)\" on \(UTCTimestamp.iso8601(record.replacedAt)) "
            + "was kept until \(UTCTimestamp.iso8601(record.keptUntil)); it is removed, freeing \(FreeSpace.describe(record.bytes))"
    }

    private func writeRecord(backupName: String, replacedAt: Date, keptUntil: Date) throws -> ReplacedStore {
        var record = ReplacedStoreRecord(
            backupName: backupName, replacedAt: replacedAt, bytes: FileSystem.treeSize(layout.replaced), keptUntil: keptUntil)
        if let written = ReplacedStoreRecord.load(from: layout.replacedRecord), written.backupName == backupName,
            written.keptUntil == UTCTimestamp.parseISO8601(UTCTimestamp.iso8601(keptUntil))
        {
            // Written before a crash: its time of replacement is the true one.
            record = written
        } else {
            try record.save(to: layout.replacedRecord)
        }
        return ReplacedStore(
            path: layout.replaced, bytes: record.bytes, replacedBy: backupName, replacedAt: record.replacedAt,
            keptUntil: record.keptUntil)
    }

    /// The kept store goes to a scratch name (returned, for the caller to remove) and its
    /// record goes.
    private func dropKept() throws -> [String] {
        var discards: [String] = []
        if FileSystem.fileExists(layout.replaced) { discards.append(try setAside(layout.replaced, purpose: "earlier-replaced")) }
        try removeRecord()
        return discards
    }

    private func removeRecord() throws {
        guard FileSystem.fileExists(layout.replacedRecord) else { return }
        guard unlink(layout.replacedRecord) == 0 || errno == ENOENT else {
            throw StoreBackupError.io(path: layout.replacedRecord, operation: "unlink", errno: errno)
        }
        try FileSystem.fsync(path: layout.parent)
    }

    /// Renames `path` to a scratch name beside the store, durably, and returns that name.
    private func setAside(_ path: String, purpose: String) throws -> String {
        let scratch = ScratchFiles.path(in: layout.parent, purpose: purpose)
        try FileSystem.rename(from: path, to: scratch)
        try FileSystem.fsync(path: layout.parent)
        return scratch
    }
}
