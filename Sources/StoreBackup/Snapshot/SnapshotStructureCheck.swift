import CSQLite
import Foundation

/// What create's `PRAGMA integrity_check` of a snapshot said.
enum StructureCheckResult: Sendable, Equatable {
    /// "ok": the snapshot's bytes may be proven.
    case passed
    /// The database was already damaged in the live store: SQLite's answer.
    case damaged(String)
    /// No answer (create stopped first, or SQLite could not run it): no proof, restore checks it.
    case notRun(String)
}

/// Create's `PRAGMA integrity_check` of one snapshot: waiting for its turn on the prover's
/// thread (``SnapshotProver``), running, or answered. A proof costs a core's time beside the
/// archive instead of a restore's wait on every restore day (docs/FORMAT.md, "Database proofs").
// Unchecked: every field is guarded by `state`'s condition; the connection is used only by
// ``run(_:)``'s thread, and `sqlite3_interrupt` is the one call SQLite allows from another.
final class SnapshotStructureCheck: @unchecked Sendable {
    private let state = NSCondition()
    private var handle: OpaquePointer?
    private var running = false
    private var result: StructureCheckResult?

    /// Runs the check through `connection` on the calling thread, unless it was stopped first.
    func run(_ connection: SQLiteConnection) {
        state.lock()
        guard result == nil else { return state.unlock() }
        running = true
        handle = connection.handle
        state.unlock()
        let outcome: StructureCheckResult
        do {
            try connection.check(quick: false)
            outcome = .passed
        } catch let error as StoreBackupError where error.isSQLiteDamage || Self.isCheckFailure(error) {
            outcome = .damaged(Self.answer(error))
        } catch {
            outcome = .notRun((error as? StoreBackupError)?.summary ?? "\(error)")
        }
        end(outcome)
    }

    /// Records an answer without running (no connection to run it on, say).
    func end(_ outcome: StructureCheckResult) {
        state.lock()
        if result == nil { result = outcome }
        running = false
        handle = nil
        state.broadcast()
        state.unlock()
    }

    /// Waits for the answer.
    func wait() -> StructureCheckResult {
        state.lock()
        defer { state.unlock() }
        while result == nil { state.wait() }
        return result ?? .notRun("no answer")
    }

    /// Whether it has its answer.
    var hasEnded: Bool {
        state.lock()
        defer { state.unlock() }
        return result != nil
    }

    /// Stops it: one still waiting never runs, a running one stops at SQLite's next step.
    func stop() {
        state.lock()
        defer { state.unlock() }
        if running, let handle {
            sqlite3_interrupt(handle)
        } else if result == nil {
            result = .notRun("create stopped before the check")
            state.broadcast()
        }
    }

    private static func isCheckFailure(_ error: StoreBackupError) -> Bool {
        if case .databaseCheckFailed = error { return true }
        return false
    }

    private static func answer(_ error: StoreBackupError) -> String {
        switch error {
        case .databaseCheckFailed(_, let result): return result
        case .sqlite(_, _, let message): return message
        default: return error.summary
        }
    }
}

/// Checks create's snapshots one after another on one thread of its own, beside the archive:
/// one core's worth at most, however many databases a store holds.
enum SnapshotProver {
    /// Marks each snapshot as to be checked (its transaction then outlives the archive's reads
    /// until its check ends) and starts the thread; join the group after finishing them.
    static func start(_ snapshots: [DatabaseSnapshot]) -> WorkerPool.Group? {
        guard !snapshots.isEmpty else { return nil }
        for snapshot in snapshots { snapshot.expectStructureCheck() }
        return WorkerPool.start(name: "storebackup-prove", width: 1, batch: true) { _ in
            for snapshot in snapshots { snapshot.runStructureCheck() }
        }
    }
}
