import Foundation

/// What a long operation reports while it runs.
public struct BackupProgress: Sendable, Equatable {
    public enum Phase: String, Sendable {
        case scanning, snapshotting, archiving, uploading, downloading, verifying, extracting, checking, swapping, reloading, done
    }
    public var phase: Phase
    /// Bytes done and total for the current phase (0 when not known).
    public var bytesDone: Int64
    public var bytesTotal: Int64
    /// The file being worked on, relative to the stores directory, when there is one.
    public var currentFile: String?

    public init(phase: Phase, bytesDone: Int64 = 0, bytesTotal: Int64 = 0, currentFile: String? = nil) {
        self.phase = phase
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.currentFile = currentFile
    }
}

public typealias ProgressHandler = @Sendable (BackupProgress) -> Void

/// Drops progress updates that come faster than a person can read, but never the first
/// or last of a phase.
final class ProgressThrottle: @unchecked Sendable {
    private let handler: ProgressHandler?
    private let lock = NSLock()
    private var lastReport = Date.distantPast
    private var lastPhase: BackupProgress.Phase?

    init(_ handler: ProgressHandler?) { self.handler = handler }

    func report(_ progress: BackupProgress, force: Bool = false) {
        guard let handler else { return }
        let now = Date()
        let shouldReport: Bool = lock.withLock {
            let due = force || lastPhase != progress.phase || now.timeIntervalSince(lastReport) >= 0.1
            if due { lastReport = now; lastPhase = progress.phase }
            return due
        }
        if shouldReport { handler(progress) }
    }
}
