import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a restore was doing, written (atomically, fsynced) before each step, so a
/// restore killed at any moment can be finished or undone by the next command.
struct RestoreJournal: Codable, Sendable {
    enum Phase: String, Codable, Sendable {
        /// Unpacking into `_New`; the live store is untouched.
        case extracting
        /// Renaming live → `_Old` and `_New` → live.
        case swapping
        /// The new store is live; the app is reloading it.
        case reloading
        /// The reload failed: new → `_FailedRestore`, `_Old` → live.
        case rollingBack
        /// The restore succeeded; removing `_Old`.
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
