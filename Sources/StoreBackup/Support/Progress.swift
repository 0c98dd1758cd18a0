import Foundation

/// What a long operation reports while it runs.
///
/// Pass a ``ProgressHandler`` to ``StoreHelper/createBackup(_:progress:)``,
/// ``StoreHelper/restore(_:options:hooks:progress:)`` or ``BackupRepository/verify(_:options:metadataOnly:progress:)``, or run the
/// operation as a ``BackupOperation`` to read the same values as an `AsyncSequence`.
/// Updates arrive at most about ten times a second per phase, but the first and last
/// update of every phase always arrive.
public struct BackupProgress: Sendable, Equatable {
    /// The step an operation is in. Each operation goes through a subset, in this order.
    public enum Phase: String, Sendable {
        /// Walking the stores directory (create).
        case scanning
        /// Opening a consistent read snapshot of every database (create).
        case snapshotting
        /// Compressing files into the archive (create); bytes count uncompressed input.
        case archiving
        /// Sending the finished archive to the destination (create).
        case uploading
        /// Fetching the archive from a remote destination (restore, verify).
        case downloading
        /// Checking an archive as a whole (verify).
        case verifying
        /// Unpacking and checksumming files (restore into `<store>_New`, verify into scratch).
        case extracting
        /// Running `PRAGMA integrity_check` on the unpacked databases (restore, verify).
        case checking
        /// Renaming the live store aside and the restored one into place (restore).
        case swapping
        /// The app's ``ReloadHooks/reload`` is opening the restored store (restore).
        case reloading
        /// The operation has finished successfully.
        case done
    }

    /// The step the operation is in.
    public var phase: Phase
    /// Bytes done in the current phase (0 when not known).
    public var bytesDone: Int64
    /// Bytes the current phase will handle in all (0 when not known, e.g. a download of unknown size).
    public var bytesTotal: Int64
    /// The file being worked on, relative to the stores directory, when there is one.
    public var currentFile: String?
    /// At most how many phases (tasks) of the operation are still to come after this one:
    /// 0 on ``Phase/done``. Some may be skipped (a local folder needs no upload or download),
    /// so it can drop by more than one. nil when the operation's plan is not known (a
    /// destination's own progress reported outside ``StoreHelper``).
    public var remainingPhases: Int?

    /// Creates a progress value; the library makes these, apps normally only read them.
    public init(
        phase: Phase, bytesDone: Int64 = 0, bytesTotal: Int64 = 0, currentFile: String? = nil,
        remainingPhases: Int? = nil
    ) {
        self.phase = phase
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.currentFile = currentFile
        self.remainingPhases = remainingPhases
    }

    /// `bytesDone / bytesTotal` in 0...1, or nil when the total is not known.
    public var fractionCompleted: Double? {
        guard bytesTotal > 0 else { return nil }
        return min(1, max(0, Double(bytesDone) / Double(bytesTotal)))
    }
}

/// Receives progress updates. It is called on the library's worker threads, so it must be
/// quick and must not block; hop to your own actor or queue for anything more.
public typealias ProgressHandler = @Sendable (BackupProgress) -> Void

/// The phases one kind of operation goes through, in order, so each update can say how
/// many are still to come.
enum ProgressPlan {
    static let create: [BackupProgress.Phase] = [.scanning, .snapshotting, .archiving, .uploading, .done]
    static let restore: [BackupProgress.Phase] = [.downloading, .extracting, .checking, .swapping, .reloading, .done]
    static let verify: [BackupProgress.Phase] = [.downloading, .extracting, .checking, .done]

    /// Wraps `handler` so every update carries `remainingPhases` for `plan`.
    static func stamping(_ plan: [BackupProgress.Phase], _ handler: ProgressHandler?) -> ProgressHandler? {
        guard let handler else { return nil }
        return { update in
            var update = update
            if update.remainingPhases == nil, let index = plan.firstIndex(of: update.phase) {
                update.remainingPhases = plan.count - 1 - index
            }
            handler(update)
        }
    }
}

/// Drops progress updates that come faster than a person can read, but never the first
/// or last of a phase.
final class ProgressThrottle: Sendable {
    private let handler: ProgressHandler?
    private let last = Locked<(report: Date, phase: BackupProgress.Phase?)>((Date.distantPast, nil))

    init(_ handler: ProgressHandler?) { self.handler = handler }

    func report(_ progress: BackupProgress, force: Bool = false) {
        guard let handler else { return }
        let now = Date()
        let shouldReport: Bool = last.withLock { last in
            let due = force || last.phase != progress.phase || now.timeIntervalSince(last.report) >= 0.1
            if due { last = (now, progress.phase) }
            return due
        }
        if shouldReport { handler(progress) }
    }
}
