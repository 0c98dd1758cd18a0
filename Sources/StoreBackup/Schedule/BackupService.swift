import Foundation
import Logging
import ServiceLifecycle

/// Backs up stores on their schedules: the long-running heart of `storebackup run`, and
/// the piece an app embeds to back itself up.
///
/// A `swift-service-lifecycle` `Service`: add it to a `ServiceGroup` (or call `run()` in a
/// task of your own). For each `StoreJob` it
/// - waits for the next scheduled time (plus up to `jitter`, at random);
/// - catches up once at start-up when a scheduled run was missed while the service was not
///   running (the state file says when the last run was);
/// - never runs two backups of one store at once (a firing that comes while the previous run
///   is still going is skipped and logged);
/// - applies the store's retention after each successful backup, to this host's backups of
///   this store only;
/// - records the outcome in the store's `BackupState` file and runs its hooks;
/// - for a store with several destinations (`StoreJob.mirrors`), builds each backup once and
///   publishes it to each; one failing does not stop the others, but fails the run;
/// - verifies each new backup before retention (``StoreJob/verifyAfterCreate``), and runs
///   restore drills on their own schedule (``StoreJob/verify``, ``verifyNow(_:at:)``).
///
/// On graceful shutdown (SIGTERM/SIGINT in a `ServiceGroup`) or task cancellation, waiting
/// stops and a backup in flight is cancelled: its temporary archive is removed and nothing
/// partial is published; `run()` then returns.
///
/// ```swift
/// let configuration = try BackupConfiguration.load(path: "/etc/storebackup.yml")
/// let service = BackupService(configuration: configuration, logger: Logger(label: "backup"))
/// let group = ServiceGroup(services: [service, httpServer], gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// // elsewhere, e.g. an admin endpoint:
/// let outcome = try await service.backUpNow("app")
/// ```
public final class BackupService: Service, Sendable {
    /// The stores this service backs up.
    public let jobs: [StoreJob]
    /// Where each store's ``BackupState`` is kept between runs.
    public let stateStore: BackupStateStore
    /// Credentials, endpoints, TLS and retry settings for remote destinations.
    public let destinationOptions: DestinationOptions
    /// Where runs, retention and hooks are logged; lines about one store carry its name as `store` metadata.
    public let logger: Logger
    /// The proof key file (``ProofKey``) that proves the databases of unencrypted backups,
    /// made by the first backup that needs it; nil: ``ProofKey/defaultPath(environment:)``.
    public let proofKeyFile: String?
    let running = RunningStores()
    /// The clock of scheduled runs, of the points they make and of the safety net: the
    /// system's; tests step it to cover an hour in seconds.
    let now: @Sendable () -> Date
    /// How a job's destination value becomes a destination: ``DestinationResolver``; tests
    /// wrap what it returns to count requests.
    let resolveDestination: @Sendable (String?, DestinationOptions) throws -> any BackupDestination
    /// How recent a change may be for a fingerprint to count as racy (see ``StoreFingerprint``).
    let racyWindowNanoseconds: Int64

    /// - Parameters:
    ///   - jobs: the stores to back up; names must be unique.
    ///   - stateStore: where per-store state (last success/failure, next run) is kept.
    ///   - destinationOptions: credentials, endpoints and TLS for remote destinations (their
    ///     retries are logged to `logger`).
    ///   - logger: where the service logs each run, retention and hook outcome.
    ///   - proofKeyFile: the proof key file for unencrypted backups' database proofs (made by
    ///     the first backup); nil: ``ProofKey/defaultPath(environment:)``.
    public convenience init(
        jobs: [StoreJob], stateStore: BackupStateStore = BackupStateStore(directory: BackupStateStore.defaultDirectory()),
        destinationOptions: DestinationOptions = DestinationOptions(), logger: Logger, proofKeyFile: String? = nil
    ) {
        self.init(
            jobs: jobs, stateStore: stateStore, destinationOptions: destinationOptions, logger: logger, proofKeyFile: proofKeyFile,
            now: { TestHooks.clock?() ?? Date() }, resolveDestination: { try DestinationResolver.resolve($0, options: $1) },
            racyWindowNanoseconds: ChangeDetector.racyWindowNanoseconds)
    }

    /// The service with its clock, resolver and racy window given (tests).
    init(
        jobs: [StoreJob], stateStore: BackupStateStore, destinationOptions: DestinationOptions, logger: Logger, proofKeyFile: String?,
        now: @escaping @Sendable () -> Date,
        resolveDestination: @escaping @Sendable (String?, DestinationOptions) throws -> any BackupDestination,
        racyWindowNanoseconds: Int64
    ) {
        self.now = now
        self.resolveDestination = resolveDestination
        self.racyWindowNanoseconds = racyWindowNanoseconds
        self.proofKeyFile = proofKeyFile
        self.jobs = jobs
        self.stateStore = stateStore
        self.destinationOptions = destinationOptions
        self.logger = logger
    }

    /// A service for every store of a parsed configuration file.
    public convenience init(configuration: BackupConfiguration, logger: Logger) {
        self.init(
            jobs: configuration.stores, stateStore: configuration.stateStore,
            destinationOptions: configuration.destinationOptions(), logger: logger, proofKeyFile: configuration.proofKeyFile)
    }

    /// Runs every store's schedule until graceful shutdown or cancellation.
    public func run() async throws {
        logger.info("scheduler started", metadata: ["stores": "\(jobs.map(\.name).joined(separator: ", "))"])
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                for job in self.jobs {
                    group.addTask { await self.runSchedule(of: job) }
                    if let drill = job.verify { group.addTask { await self.runDrillSchedule(of: job, drill: drill) } }
                }
            }
        }
        logger.info("scheduler stopped")
    }

    /// Backs one store up now (outside its schedule), then applies its retention, records
    /// the state and runs its hooks, exactly as a scheduled run does. Throws
    /// ``StoreBackupError/backupAlreadyRunning(store:)`` when that store's backup is in progress, and
    /// the backup's error when it fails (the failure is recorded first).
    @discardableResult
    public func backUpNow(_ storeName: String) async throws -> BackupRunOutcome {
        guard let job = jobs.first(where: { $0.name == storeName }) else { throw StoreBackupError.unknownStore(name: storeName) }
        let compaction = try await compactPoints(job, log: logger.with(store: job.name))
        var outcome = try await runOnce(job)
        outcome.merged = compaction.merged
        outcome.pruned = compaction.pruned + outcome.pruned
        if let error = outcome.error { throw error }
        return outcome
    }

    /// Runs each store once now, one after another, as its schedule would (a scheduled run:
    /// no point for an unchanged incremental store, ended hours and days merged first with
    /// levels), for a cron line or a timer (`storebackup run --once`). A store whose run fails
    /// has its error in its outcome.
    public func runEachStoreOnce() async -> [BackupRunOutcome] {
        var outcomes: [BackupRunOutcome] = []
        for job in jobs {
            do {
                outcomes.append(try await runScheduled(job))
            } catch {
                var failed = BackupRunOutcome(store: job.name, startedAt: now())
                failed.error = StoreBackupError.wrapping(error)
                outcomes.append(failed)
            }
        }
        return outcomes
    }

    /// Each store's recorded state (nil for a store that has never run).
    public func states() -> [(job: StoreJob, state: BackupState?)] {
        jobs.map { ($0, stateStore.load($0.name)) }
    }

    // MARK: the schedule of one store

    private func runSchedule(of job: StoreJob) async {
        let log = logger.with(store: job.name)
        var next = firstRun(of: job, now: Date(), log: log)
        while !Task.isCancelled {
            recordNextRun(next, of: job, log: log)
            guard await sleep(until: next) else { break }
            let fired = Date()
            do {
                _ = try await runScheduled(job)
            } catch StoreBackupError.backupAlreadyRunning {
                log.warning("the previous backup is still running; skipping this run")
            } catch {
                log.error("run failed", metadata: ["error": "\(error)"])
            }
            if Task.isCancelled { break }
            next = job.schedule.nextFire(afterRunFiredAt: fired, endedAt: Date()) + randomJitter(job)
        }
        // Stopped: no run is planned any more (status then shows when the schedule would fire).
        _ = try? stateStore.update(job.name, default: initialState(job)) { $0.nextRun = nil }
    }

    /// The first run: now when one was missed, or when an interval schedule has never run
    /// (a store without a backup should not wait an interval for its first), else the next
    /// scheduled time.
    func firstRun(of job: StoreJob, now: Date, log: Logger) -> Date {
        let state = stateStore.load(job.name)
        if let last = state?.lastSuccess?.at ?? state?.lastStarted {
            if job.schedule.missedRun(lastRun: last, now: now) {
                log.info("a scheduled run was missed (last run \(UTCTimestamp.iso8601(last))); running now")
                return now
            }
            if case .every = job.schedule { return job.schedule.nextFire(after: last) + randomJitter(job) }
        } else if case .every = job.schedule {
            return now
        }
        return job.schedule.nextFire(after: now) + randomJitter(job)
    }

    private func randomJitter(_ job: StoreJob) -> TimeInterval {
        job.jitter > 0 ? TimeInterval.random(in: 0...job.jitter) : 0
    }

    private func recordNextRun(_ next: Date, of job: StoreJob, log: Logger) {
        do {
            try stateStore.update(job.name, default: initialState(job)) {
                $0.nextRun = next; $0.schedule = job.schedule.description
            }
        } catch {
            log.warning("cannot write the state file", metadata: ["error": "\(error)"])
        }
        log.info("next backup at \(UTCTimestamp.iso8601(next))")
    }

    /// Sleeps until the wall-clock time `date`, in steps of at most a minute so a suspended
    /// machine or a changed clock is noticed. Returns false when cancelled.
    func sleep(until date: Date) async -> Bool {
        while true {
            let remaining = date.timeIntervalSinceNow
            if remaining <= 0 { return !Task.isCancelled }
            do { try await Task.sleep(nanoseconds: UInt64(min(remaining, 60) * 1_000_000_000)) } catch { return false }
        }
    }

    // MARK: one run

    func initialState(_ job: StoreJob) -> BackupState {
        BackupState(
            store: job.name, storesDirectory: job.storesDirectory, destination: job.destination.map(RemoteURL.redacted),
            schedule: job.schedule.description)
    }

    /// A scheduled run: no point when an incremental job's store looks as it did at its
    /// last point (``pointNotNeeded(_:log:)``), else ``runOnce(_:scheduled:)``.
    func runScheduled(_ job: StoreJob) async throws -> BackupRunOutcome {
        let log = logger.with(store: job.name)
        let compaction = try await compactPoints(job, log: log)
        if let last = pointNotNeeded(job, log: log) {
            log.debug("the store is unchanged since \(last); no point")
            var outcome = BackupRunOutcome(store: job.name, startedAt: now())
            outcome.unchangedSince = last
            outcome.merged = compaction.merged
            outcome.pruned = compaction.pruned
            return outcome
        }
        var outcome = try await runOnce(job, scheduled: true)
        outcome.merged = compaction.merged
        outcome.pruned = compaction.pruned + outcome.pruned
        return outcome
    }

    /// `scheduled`: a run of the schedule, whose point is not published when it would hold
    /// nothing new (``CreateOptions/skipsUnchangedPoint``); a backup asked for now always is.
    func runOnce(_ job: StoreJob, scheduled: Bool = false) async throws -> BackupRunOutcome {
        guard running.begin(job.name) else { throw StoreBackupError.backupAlreadyRunning(store: job.name) }
        defer { running.end(job.name) }
        let log = logger.with(store: job.name)
        let started = now()
        _ = try? stateStore.update(job.name, default: initialState(job)) {
            $0.lastStarted = started; $0.nextRun = nil
        }
        log.info("backup started")
        return await publish(job, outcome: BackupRunOutcome(store: job.name, startedAt: started), scheduled: scheduled, log: log)
    }

    /// The one place a job becomes a `StoreHelper` and its ``CreateOptions``.
    func makeHelper(for job: StoreJob, destination: any BackupDestination) -> (helper: StoreHelper, options: CreateOptions) {
        // The password file is read at each run, so a changed password applies to the next backup.
        var helper = StoreHelper(
            storesDirectory: job.storesDirectory, destination: destination, passwords: job.passwordFile.map(PasswordProvider.file),
            logger: logger.with(store: job.name))
        helper.metricsName = job.name
        helper.now = now
        var options = CreateOptions(
            compressionLevel: job.compressionLevel, encrypt: job.passwordFile != nil, threads: job.threads,
            incremental: job.chainPolicy)
        options.keepsPointCopies = job.levels != nil && job.mirrors.isEmpty
        options.levels = job.mirrors.isEmpty ? job.levels : nil
        // Points a minute apart list the destination once per safety-net interval, not each time,
        // and run no integrity_check (fulls do).
        if let policy = job.incremental, policy.fullScanEvery > 0 {
            options.trustChainCacheFor = policy.fullScanEvery
            options.checkDatabasesOfPoints = false
            options.provePointsEvery = BackupService.provePointsEvery
        }
        if job.passwordFile == nil {
            // Without a key the backup is still made, unproven: restore then checks its databases.
            let path = proofKeyFile ?? ProofKey.defaultPath()
            do { options.proofKey = try ProofKey.loadOrCreate(at: path) } catch {
                logger.with(store: job.name).warning("no database proofs: \(error)")
            }
        }
        return (helper, options)
    }

    /// How often a scheduled point's databases are checked and proven all the same (one
    /// `integrity_check` of each database): its restore, and that of the hour's or day's
    /// point merged from it, then skips the check.
    static let provePointsEvery: TimeInterval = 1_800

    /// ``destinationOptions`` with `log` as the destinations' logger (their retries).
    func destinationOptions(logging log: Logger) -> DestinationOptions {
        var options = destinationOptions
        options.logger = log
        return options
    }

    func applyRetention(_ policy: RetentionPolicy, job: StoreJob, at repository: BackupRepository, host: String, log: Logger)
        async throws -> [String]
    {
        let groups = try await repository.retentionPlan(
            policy, host: host, storesDirectory: job.storesDirectory, originCache: stateStore.directory)
        for group in groups {
            for decision in group.decisions where !decision.keep {
                log.info("retention: deleting \(decision.backup.name)", metadata: ["policy": "\(policy.summary)"])
            }
        }
        return try await repository.prune(
            groups,
            locked: { name, until in
                log.info("retention: kept \(name): locked \(until.map { "until \($0)" } ?? "by a legal hold") (S3 Object Lock)")
            },
            keptAsBase: { name, dependent in log.info("retention: kept \(name): base of \(dependent), which is kept") })
    }

    func record(_ outcome: BackupRunOutcome, job: StoreJob, log: Logger) {
        do {
            try stateStore.update(job.name, default: initialState(job)) { state in
                if let backup = outcome.backup, !outcome.verificationFailed {
                    state.lastSuccess = BackupState.Success(
                        at: outcome.finishedAt, backup: backup.name, size: backup.size,
                        durationSeconds: outcome.finishedAt.timeIntervalSince(outcome.startedAt))
                }
                if let error = outcome.error {
                    state.lastFailure = BackupState.Failure(at: outcome.finishedAt, error: Self.describe(error))
                }
                // Several destinations: each one's own last success or failure.
                for published in outcome.destinations {
                    var record = state.destinations?[published.destination] ?? BackupState.DestinationRecord()
                    if let backup = published.backup {
                        record.lastSuccess = BackupState.Success(
                            at: outcome.finishedAt, backup: backup.name, size: backup.size,
                            durationSeconds: backup.archiveSeconds + backup.uploadSeconds)
                    } else if let error = published.error {
                        record.lastFailure = BackupState.Failure(at: outcome.finishedAt, error: Self.describe(error))
                    }
                    state.destinations = (state.destinations ?? [:]).merging([published.destination: record]) { _, new in new }
                }
            }
        } catch {
            log.warning("cannot write the state file", metadata: ["error": "\(error)"])
        }
        if let error = outcome.error {
            if outcome.wasCancelled {
                log.notice("backup cancelled; nothing was published")
            } else {
                log.error("backup failed", metadata: ["error": "\(Self.describe(error))"])
            }
        }
    }

    func runHooks(for outcome: BackupRunOutcome, job: StoreJob, destination: String, log: Logger) async {
        // A backup cancelled by shutdown is not a failure worth an alert.
        if outcome.wasCancelled { return }
        let actions = outcome.error == nil ? job.hooks.onSuccess : job.hooks.onFailure
        guard !actions.isEmpty else { return }
        let event = HookEvent(
            event: outcome.error == nil ? "success" : "failure", store: job.name, storesDirectory: job.storesDirectory,
            destination: destination, host: BackupOrigin.currentHost, startedAt: outcome.startedAt, finishedAt: outcome.finishedAt,
            backup: outcome.backup?.name, size: outcome.backup?.size, error: outcome.error.map(Self.describe),
            pruned: outcome.error == nil ? outcome.pruned : nil)
        // Hooks run even during shutdown: detached from cancellation, bounded by their timeouts.
        let runner = HookRunner(logger: log, transport: destinationOptions.transport)
        _ = await Task.detached { await runner.run(actions, event: event) }.value
    }

    static func describe(_ error: Error) -> String {
        if let error = error as? StoreBackupError { return error.description }
        if error is CancellationError { return StoreBackupError.cancelled.description }
        return "\(error)"
    }
}

/// What one run of one store did.
public struct BackupRunOutcome: Sendable {
    /// The store's name (``StoreJob/name``).
    public var store: String
    /// When the run began.
    public var startedAt: Date
    /// When the run ended: after the check and retention, before the state was written and
    /// the hooks ran.
    public var finishedAt: Date
    /// The new backup (nil when the run failed).
    public var backup: BackupResult?
    /// Why the run failed.
    public var error: StoreBackupError?
    /// The run made no point: the store looked as it did when this backup, its last point,
    /// was made (scheduled runs of incremental jobs; see ``IncrementalPolicy/fullScanEvery``).
    public internal(set) var unchangedSince: String?
    /// Backups deleted by retention after this one.
    public var pruned: [String] = []
    /// With levels (``StoreJob/levels``): the points this run merged an ended hour's or day's
    /// points into, before it looked at the store (docs/levels.md).
    public var merged: [String] = []
    /// Retention failed after a successful backup (the backup stands).
    public var retentionError: String?
    /// The backup was published but failed its check after create (``StoreJob/verifyAfterCreate``):
    /// `error` says why; the backup is kept, no retention ran, and it is not recorded as a success.
    public var verificationFailed = false
    /// With several destinations: how each one went, the first destination first
    /// (`backup` is then the first that succeeded, and `error` is set when any failed).
    public var destinations: [PublishOutcome] = []

    init(store: String, startedAt: Date) {
        self.store = store
        self.startedAt = startedAt
        self.finishedAt = startedAt
    }

    /// The run stopped because it was cancelled (graceful shutdown or task cancellation), not
    /// because something failed: no hooks run for it.
    public var wasCancelled: Bool {
        guard let error else { return false }
        // StoreBackupError.wrapping turns a CancellationError into .cancelled.
        return error == .cancelled
    }
}

/// Which stores have a run in progress: the guard against overlapping runs. Ended
/// synchronously when a run returns, so a run started right after it is not refused.
final class RunningStores: Sendable {
    private let names = Locked(Set<String>())
    func begin(_ name: String) -> Bool { names.withLock { $0.insert(name).inserted } }
    func end(_ name: String) { _ = names.withLock { $0.remove(name) } }
}

extension Logger {
    func with(store: String) -> Logger {
        var copy = self
        copy[metadataKey: "store"] = "\(store)"
        return copy
    }
}
