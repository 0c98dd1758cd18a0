import Foundation

/// `PRAGMA integrity_check` on the databases an extraction unpacks: the longest single-threaded
/// step of a restore, run on threads of its own beside the unpacking (``ParallelUnpacking``),
/// judged by ``DamageJudge``. (The quick check a reload runs on a whole store is
/// ``DatabaseCheck``.)
enum IntegrityCheck {
    /// `PRAGMA integrity_check` on an extracted database nobody else has open; with
    /// `unpacking`, on one still being written.
    static func run(_ path: String, unpacking: UnpackingDatabase? = nil) throws {
        let connection = try SQLiteConnection(path: path, mode: unpacking.map { .unpacking($0) } ?? .immutable)
        defer { connection.close() }
        try connection.check(quick: false)
        // Closed and passed: reload need not read the same bytes again (CheckedDatabases),
        // once the file is as it stays (its mode and time are set last).
        connection.close()
        if let unpacking, !unpacking.waitUntilDone() { return }
        CheckedDatabases.record(path)
    }

    /// Checks each of `paths`, `workers` at a time.
    static func runAll(_ paths: [String], workers: Int, cancel: CancellationFlag) throws {
        try WorkerPool.forEach(paths, name: "storebackup-check", width: workers, cancel: cancel) { path in
            try run(path)
        }
    }
}

/// A database to pass through `PRAGMA integrity_check`; with `unpacking`, while it is written.
struct IntegrityCheckJob: Sendable {
    let path: String
    /// The path relative to the stores directory, for messages.
    let entryPath: String
    let unpacking: UnpackingDatabase?
}
