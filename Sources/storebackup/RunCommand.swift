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
            """)

    @OptionGroup var configurationFile: ConfigurationOption

    @OptionGroup var metrics: MetricsFileOption

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
