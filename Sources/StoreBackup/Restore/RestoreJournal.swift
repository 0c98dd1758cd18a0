import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a restore (or an undo of one) was doing, written (atomically, fsynced) before each
/// step, so one killed at any moment can be finished or undone by the next command.
///
/// An undo goes through the same phases with `_Replaced` (the kept store) in the place of
/// `_New`: before `swapping` nothing was moved; its rollback puts the kept store back to
/// `_Replaced`; its commit removes `_Old` (the restored store) and the kept store's record.
struct RestoreJournal: Codable, Sendable {
    enum Phase: String, Codable, Sendable {
        /// Unpacking into `_New`; the live store is untouched. (Undo: nothing moved yet.)
        case extracting
        /// Renaming live → `_Old` and `_New` → live.
        case swapping
        /// The new store is live; the app is reloading it.
        case reloading
        /// The reload failed: new → `_FailedRestore`, `_Old` → live.
        case rollingBack
        /// The restore succeeded; keeping `_Old` as `_Replaced` or removing it.
        case committing
        /// The store is whole again (committed, rolled back or never touched); only the
        /// app's start command is left to run.
        case startingApp
    }

    var phase: Phase
    var backupName: String
    var hadLiveStore: Bool
    /// The restore ran the app's stop command (written before it runs): until the journal
    /// goes, the app may be stopped, and recovery says so.
    var appStopped: Bool? = nil
    /// The app's start command, for recovery to run when the restore died before it did.
    var startCommand: String? = nil
    /// This transaction puts the kept `_Replaced` store back (an undo); nil: a restore.
    var undo: Bool? = nil
    /// A restore's commit keeps `_Old` as `_Replaced` until then; nil drops it.
    var keepReplacedUntil: Date? = nil
    var pid: Int32 = getpid()
    var updatedAt = Date()

    static func load(from path: String) -> RestoreJournal? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .utcTimestamp
        return try? decoder.decode(RestoreJournal.self, from: data)
    }

    func save(to path: String) throws {
        var copy = self
        copy.updatedAt = Date()
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .utcTimestamp
        try DurableFile.write(try encoder.encode(copy), to: path)
    }

    static func remove(at path: String) {
        unlink(path)
        try? FileSystem.fsync(path: FileSystem.parentDirectory(of: path))
    }
}
