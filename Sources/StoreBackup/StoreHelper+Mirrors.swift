import Foundation

/// How publishing one backup went at one of several destinations.
public struct PublishOutcome: Sendable {
    /// The destination's ``BackupDestination/displayName``.
    public var destination: String
    /// The backup as published there; nil when it failed there.
    public var backup: BackupResult?
    /// Why it failed there; nil when it succeeded.
    public var error: StoreBackupError?

    /// True when the backup was published at this destination.
    public var succeeded: Bool { backup != nil }
}

extension StoreHelper {
    /// Builds one backup and publishes it to ``destination`` and to each of `mirrors`
    /// (the 3-2-1 rule): the store is archived once (in a local folder destination when there
    /// is one, else in `TMPDIR`), and that file is uploaded to each destination in turn under
    /// the name the first one took, where free.
    ///
    /// A destination that fails (its preflight or its upload) does not stop the others;
    /// its outcome carries the error. Metrics are recorded per destination.
    ///
    /// - Returns: One outcome per destination, ``destination`` first, in order.
    /// - Throws: Only when nothing could be built (a locked store, no databases, a missing
    ///   password, cancellation): then nothing was published anywhere.
    public func createBackup(alsoTo mirrors: [any BackupDestination], progress: ProgressHandler? = nil) async throws -> [PublishOutcome] {
        let started = ContinuousClock.now
        let destinations: [any BackupDestination] = [destination] + mirrors
        var outcomes = destinations.map { PublishOutcome(destination: $0.displayName) }
        func recordFailures() {
            for outcome in outcomes where !outcome.succeeded {
                BackupMetrics.recordBackup(store: metricsStoreName, destination: outcome.destination, size: nil,
                                           seconds: Self.seconds(ContinuousClock.now - started), at: Date())
            }
        }
        do {
            let password = try archivePassword()
            var reachable: [Int] = []
            for (index, target) in destinations.enumerated() {
                do { try await target.preflight(); reachable.append(index) } catch { outcomes[index].error = StoreBackupError.wrapping(error) }
            }
            guard !reachable.isEmpty else { recordFailures(); return outcomes }
            // Build in place at the first destination that can (a local folder: no space taken in
            // TMPDIR); it is published last, because publishing there moves the archive in by rename.
            var host: (index: Int, archivePath: String)?
            for index in reachable {
                // One that cannot take it (its folder cannot be created) fails at its upload instead.
                if let path = try? destinations[index].prepareInPlaceArchive() { host = (index, path); break }
            }
            if let host { reachable.removeAll { $0 == host.index }; reachable.append(host.index) }
            let archivePath = host?.archivePath
                ?? ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "archive", suffix: ".zip")
            outcomes = try await withBuiltArchive(at: archivePath, password: password, progress: progress) { archive in
                var published = outcomes
                var start: Date?   // the name the first destination took, so all share it where free
                for index in reachable {
                    if Task.isCancelled { throw StoreBackupError.cancelled }
                    do {
                        let result = try await publish(archive, to: destinations[index], progress: progress, start: start)
                        start = start ?? BackupName.date(of: result.name)
                        published[index].backup = result
                        BackupMetrics.recordBackup(store: metricsStoreName, destination: result.destination, size: result.size,
                                                   seconds: result.archiveSeconds + result.uploadSeconds, at: Date())
                    } catch StoreBackupError.cancelled {
                        throw StoreBackupError.cancelled
                    } catch {
                        published[index].error = StoreBackupError.wrapping(error)
                    }
                }
                archive.throttle.report(BackupProgress(phase: .done, bytesDone: archive.size, bytesTotal: archive.size), force: true)
                return published
            }
        } catch {
            for index in outcomes.indices where !outcomes[index].succeeded && outcomes[index].error == nil {
                outcomes[index].error = StoreBackupError.wrapping(error)
            }
            recordFailures()
            throw error
        }
        recordFailures()
        return outcomes
    }
}
