import Foundation
import Logging

/// How one restore drill of one store went.
public struct DrillOutcome: Sendable {
    /// How the drill went at one destination.
    public struct AtDestination: Sendable {
        /// The destination's display name.
        public var destination: String
        /// One result per backup picked there, newest first.
        public var results: [VerificationResult] = []
        /// Why nothing could be verified there (it could not list, or holds no backups).
        public var error: StoreBackupError?

        /// Every backup picked there was verified and passed.
        public var succeeded: Bool { error == nil && !results.isEmpty && results.allSatisfy(\.ok) }
    }

    /// The store's name (``StoreJob/name``).
    public var store: String
    /// When the drill began.
    public var startedAt: Date
    /// When the drill ended.
    public var finishedAt: Date
    /// Each destination drilled, in the store's order (the first only, unless
    /// ``VerifyDrill/everyDestination``).
    public var destinations: [AtDestination] = []

    /// Every result, destination by destination.
    public var results: [VerificationResult] { destinations.flatMap(\.results) }
    /// True when every picked backup passed at every destination drilled.
    public var succeeded: Bool { !destinations.isEmpty && destinations.allSatisfy(\.succeeded) }
    /// The backups that failed, with where.
    public var failures: [(destination: String, result: VerificationResult)] {
        destinations.flatMap { place in place.results.filter { !$0.ok }.map { (place.destination, $0) } }
    }

    /// The drill was cancelled (graceful shutdown or task cancellation) before it finished:
    /// its outcome is not written to the state, and no hooks run.
    public var wasCancelled: Bool {
        destinations.contains { place in
            guard let error = place.error else { return false }
            return error == .cancelled
        }
    }
}

extension BackupService {
    /// Runs one restore drill of a store now: picks backups as its `verify:` setting says
    /// (the newest when it has none) as if the drill ran at `date`, verifies each in full,
    /// records the outcome in the state and metrics, and runs the on-failure hooks when a
    /// backup fails or none can be verified. A failed drill is an outcome, not an error.
    public func verifyNow(_ storeName: String, at date: Date = Date()) async throws -> DrillOutcome {
        guard let job = jobs.first(where: { $0.name == storeName }) else { throw StoreBackupError.unknownStore(name: storeName) }
        return await drill(job, at: date)
    }

    /// The drill schedule of one store, beside its backup schedule. Drills do not wait for
    /// backups nor the other way round: verifying only reads the destination. A drill
    /// missed while the service was not running is not made up; the next one comes on time.
    func runDrillSchedule(of job: StoreJob, drill settings: VerifyDrill) async {
        let log = logger.with(store: job.name)
        while !Task.isCancelled {
            let next = settings.schedule.nextFire(after: Date())
            _ = try? stateStore.update(job.name, default: initialState(job)) { $0.nextVerify = next }
            log.info("next restore drill at \(UTCTimestamp.iso8601(next))")
            guard await sleep(until: next) else { break }
            _ = await drill(job, at: Date())
        }
        _ = try? stateStore.update(job.name, default: initialState(job)) { $0.nextVerify = nil }
    }

    func drill(_ job: StoreJob, at date: Date) async -> DrillOutcome {
        let log = logger.with(store: job.name)
        let settings = job.verify ?? VerifyDrill(schedule: job.schedule)
        var outcome = DrillOutcome(store: job.name, startedAt: Date(), finishedAt: Date())
        for value in settings.everyDestination ? job.allDestinations : [job.destination] {
            let place = await drill(job, settings: settings, at: date, destination: value, log: log)
            outcome.destinations.append(place)
            if outcome.wasCancelled { return outcome }
        }
        outcome.finishedAt = Date()
        let drilled = outcome.destinations.map(\.destination).joined(separator: ", ")
        let unreachable = outcome.destinations.first { $0.error != nil }
        recordVerification(
            job: job, destination: outcome.failures.first?.destination ?? unreachable?.destination ?? drilled,
            at: outcome.finishedAt, trigger: "drill",
            passed: outcome.results.filter(\.ok).map(\.name),
            failure: outcome.failures.first.map { ($0.result.name, $0.result.problem ?? "failed") }
                ?? unreachable.map { ("", "\($0.destination): " + Self.describe($0.error!)) },
            log: log)
        if !outcome.succeeded {
            let failed = outcome.failures.first
            let error =
                failed.map {
                    "restore drill: "
                        + StoreBackupError.verificationFailed(backup: $0.result.name, problem: $0.result.problem ?? "failed").description
                }
                ?? "restore drill: " + (unreachable.map { Self.describe($0.error!) } ?? "nothing was verified")
            let event = HookEvent(
                event: "failure", store: job.name, storesDirectory: job.storesDirectory,
                destination: failed?.destination ?? unreachable?.destination ?? drilled,
                host: BackupOrigin.currentHost, startedAt: outcome.startedAt, finishedAt: outcome.finishedAt,
                backup: failed?.result.name, error: error, task: "verify")
            await runFailureHooks(job, event: event, log: log)
        }
        return outcome
    }

    /// The drill at one destination: pick, verify each, record each in the metrics.
    private func drill(_ job: StoreJob, settings: VerifyDrill, at date: Date, destination value: String?, log: Logger) async
        -> DrillOutcome.AtDestination
    {
        var place = DrillOutcome.AtDestination(
            destination: value.map(RemoteURL.redacted) ?? DestinationResolver.defaultFolder(environment: destinationOptions.environment))
        do {
            let destination = try resolveDestination(value, destinationOptions(logging: log))
            place.destination = destination.displayName
            let picked = settings.select(from: try await backups(of: job, at: destination), at: date)
            guard !picked.isEmpty else { throw StoreBackupError.noBackups(destination: destination.displayName) }
            log.info("restore drill (\(settings.pick)): verifying \(picked.map(\.name).joined(separator: ", ")) at \(place.destination)")
            let verifier = repository(of: job, at: destination)
            for backup in picked {
                let result = try await verifier.verify(.named(backup.name))[0]
                if Task.isCancelled { throw StoreBackupError.cancelled }
                // Retention may delete an old backup while it is being read: that is no failure.
                if !result.ok, let still = try? await destination.sortedBackups(), !still.contains(where: { $0.name == backup.name }) {
                    log.notice("\(backup.name) was deleted while the drill verified it; not counted")
                    continue
                }
                place.results.append(result)
                BackupMetrics.recordVerify(
                    store: job.name, destination: place.destination, backup: result.name, ok: result.ok, trigger: "drill", at: Date())
                if result.ok {
                    log.info(
                        "restore drill: \(backup.name) is restorable",
                        metadata: ["files": "\(result.files)", "databases": "\(result.databases)"])
                } else {
                    log.error("restore drill: \(backup.name) FAILED", metadata: ["problem": "\(result.problem ?? "")"])
                }
            }
        } catch {
            place.error = StoreBackupError.wrapping(error)
            let cancelled = error is CancellationError || (error as? StoreBackupError) == .cancelled
            if !cancelled {
                log.error(
                    "restore drill could not verify any backup",
                    metadata: ["destination": "\(place.destination)", "error": "\(Self.describe(error))"])
                let nothing = VerificationResult(name: "", ok: false, problem: Self.describe(error), files: 0, databases: 0)
                BackupMetrics.recordVerify(
                    store: job.name, destination: place.destination, backup: nothing.name, ok: nothing.ok, trigger: "drill", at: Date())
            }
        }
        return place
    }

    /// The destination's backups that may be this store's: those whose manifest names another
    /// stores directory (another store sharing the destination) are left out. Origins are read
    /// where that is cheap (a local folder) or already cached; the others stay in.
    func backups(of job: StoreJob, at destination: any BackupDestination) async throws -> [BackupListing] {
        let listing = try await destination.sortedBackups()
        let index = BackupOriginIndex(
            destination: destination, cacheDirectory: stateStore.directory,
            passwords: job.passwordFile.map(PasswordProvider.file))
        let origins = await index.origins(of: listing, download: false)
        return listing.filter { backup in
            guard let known = origins[backup.name], let origin = known else { return true }
            return origin.storesDirectory == FileSystem.absolutePath(job.storesDirectory)
        }
    }

    /// Verifies the backup a run just made, where it is cheapest to read (a local folder
    /// needs no download), before retention can delete an older good one. Records the
    /// outcome like a drill does; returns the error the run fails with, nil when it passed.
    /// A failed check discards the store's chain state for `destination`.
    func verifyJustMade(_ job: StoreJob, backup: String, at destination: any BackupDestination, log: Logger) async throws
        -> StoreBackupError?
    {
        let verifier = repository(of: job, at: destination)
        let result = try await verifier.verify(.named(backup))[0]
        if Task.isCancelled { throw StoreBackupError.cancelled }
        BackupMetrics.recordVerify(
            store: job.name, destination: destination.displayName, backup: result.name, ok: result.ok, trigger: "after-create", at: Date())
        recordVerification(
            job: job, destination: destination.displayName, at: Date(), trigger: "after-create",
            passed: result.ok ? [backup] : [], failure: result.ok ? nil : (backup, result.problem ?? "failed"), log: log)
        if result.ok {
            log.info("backup verified", metadata: ["backup": "\(backup)", "databases": "\(result.databases)"])
            return nil
        }
        // The chain state describes a backup that does not restore: forget it, so the next
        // run makes a full one instead of building on it.
        ChainFolder(storesDirectory: job.storesDirectory, destination: destination.displayName).remove()
        return StoreBackupError.verificationFailed(backup: backup, problem: result.problem ?? "failed")
    }

    private func recordVerification(
        job: StoreJob, destination: String, at date: Date, trigger: String, passed: [String],
        failure: (backup: String, error: String)?, log: Logger
    ) {
        do {
            try stateStore.update(job.name, default: initialState(job)) { state in
                if let failure {
                    state.lastVerifyFailure = BackupState.Verification(
                        at: date, backups: failure.backup.isEmpty ? [] : [failure.backup], destination: destination, trigger: trigger,
                        error: failure.error)
                    // A failed drill marks the store failed in `status`, as a failed backup does.
                    if trigger == "drill" { state.lastFailure = BackupState.Failure(at: date, error: "restore drill: \(failure.error)") }
                } else if !passed.isEmpty {
                    // One name once, though several destinations passed it.
                    var seen = Set<String>()
                    let names = passed.filter { seen.insert($0).inserted }
                    state.lastVerifySuccess = BackupState.Verification(at: date, backups: names, destination: destination, trigger: trigger)
                }
            }
        } catch {
            log.warning("cannot write the state file", metadata: ["error": "\(error)"])
        }
    }

    private func runFailureHooks(_ job: StoreJob, event: HookEvent, log: Logger) async {
        guard !job.hooks.onFailure.isEmpty else { return }
        let runner = HookRunner(logger: log, transport: destinationOptions.transport)
        let actions = job.hooks.onFailure
        _ = await Task.detached { await runner.run(actions, event: event) }.value
    }
}
