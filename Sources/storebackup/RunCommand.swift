import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import StoreBackup

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Back up the configured stores on their schedules, until stopped.",
        discussion: """
            Reads the YAML configuration and backs up each store at its scheduled time (daily at a \
            local time, a cron expression, or every N seconds/minutes/hours; plus random jitter). \
            A run missed while the service was not running is made at start-up. Two backups of one \
            store never overlap. After each successful backup the store's retention is applied to \
            this host's backups of that store; before it, each new backup is verified \
            (verify-after-create, on by default). A store's `verify: {schedule, pick}` adds restore \
            drills that verify backups on their own schedule (`verify --store NAME` runs one now). \
            Outcomes go to the state files (`storebackup status`), the metrics file and the hooks. \
            SIGTERM or SIGINT stops it: a backup in progress is cancelled and \
            leaves nothing behind. Logs go to stderr (STOREBACKUP_LOG_LEVEL=debug for more). \
            Each operation on a remote destination (an upload, a listing, a delete) retries what its \
            service calls transient (network errors, timeouts, 408, 429, 5xx, S3 SlowDown, Dropbox \
            too_many_write_operations) for up to `retry-for:` in the configuration (default 5m), with \
            growing, jittered pauses; `limit-upload:`/`limit-download:` cap the run's bytes per second, \
            and `retain-days:` locks each new S3 backup (S3 Object Lock).

            --once runs each store once now, as its schedule would (an incremental store makes no \
            point when it is unchanged; with `levels:` the ended hours and days are merged first), \
            then exits: non-zero when any store's run failed. For a cron line or a systemd timer.
            """)

    @OptionGroup var configurationFile: ConfigurationOption

    @OptionGroup var metrics: MetricsFileOption

    @Flag(help: "Run each store once now, as its schedule would, and exit (non-zero when a run failed).")
    var once = false

    func run() async throws {
        let configuration = configurationFile.load()
        metrics.start(configured: configuration.metricsFile)
        let level = ProcessInfo.processInfo.environment["STOREBACKUP_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "storebackup")
        let service = BackupService(configuration: configuration, logger: logger)
        if once {
            let outcomes = await Terminal.runCancellable { await service.runEachStoreOnce() }
            MetricsFile.write()
            for outcome in outcomes {
                let what =
                    outcome.backup.map { "backed up as \($0.name)" } ?? outcome.unchangedSince.map { "unchanged since \($0); no point" }
                    ?? "no backup"
                let count = outcome.merged.count
                let merged = count == 0 ? "" : "; \(count) merged point\(count == 1 ? "" : "s") made first"
                Terminal.info("storebackup: \(outcome.store): \(outcome.error.map { "failed: \($0)" } ?? what)\(merged)")
            }
            if outcomes.contains(where: { $0.error != nil }) { throw ExitCode(1) }
            return
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: service)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        // A long run rewrites the metrics file every 15 s, so node_exporter sees each backup soon after it ends.
        let exporter = Task {
            while !Task.isCancelled {
                MetricsFile.write()
                try? await Task.sleep(for: .seconds(15))
            }
        }
        defer { exporter.cancel() }
        do {
            try await group.run()
        } catch {
            Terminal.fail(error)
        }
    }
}
