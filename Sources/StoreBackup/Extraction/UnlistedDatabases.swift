import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The databases of an archive without a manifest (made by another tool), which names none:
/// searched by header among the files on disk once all are written, then checked.
enum UnlistedDatabases {
    /// Finds the databases among `files` under `target` and passes each through `PRAGMA
    /// integrity_check`. Returns their paths relative to `target`.
    static func findAndCheck(
        in target: String, among files: EntryList, workers: Int, cancel: CancellationFlag, progress: ProgressThrottle
    ) throws -> [String] {
        // Only files on disk can be databases (verify writes nothing else); none is a link.
        let escapedTarget = EscapedName.escapedRoot(target)
        let databases = files.map(\.path).filter { path in
            let full = escapedTarget + "/" + path
            var info = stat()
            return EscapedName.withSystemPath(full, { lstat($0, &info) }) == 0 && SQLiteHeader.isDatabase(path: full)
        }
        // Found only now, by header: check them here.
        progress.report(BackupProgress(phase: .checking, currentFile: databases.joined(separator: ", ")), force: true)
        try IntegrityCheck.runAll(databases.map { EscapedName.escapedRoot(target) + "/" + $0 }, workers: workers, cancel: cancel)
        return databases
    }
}
