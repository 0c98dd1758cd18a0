import Foundation
import Metrics

/// What storebackup reports through swift-metrics, so an app that embeds the library and
/// already exports metrics (e.g. swift-prometheus on `/metrics`) gets them without code of
/// its own. Nothing is reported until the app bootstraps a `MetricsSystem` factory.
///
/// Every metric carries the dimension `destination` (the destination's display name) and, but
/// for retention, `store` (``StoreHelper/metricsName``, else the stores directory's path). The names follow
/// Prometheus conventions:
///
/// | name | kind | what |
/// |---|---|---|
/// | `storebackup_backups_total` | counter, `outcome` = success/failure | backups attempted |
/// | `storebackup_backup_duration_seconds` | gauge | how long the last backup took |
/// | `storebackup_backup_size_bytes` | gauge | the last successful backup's archive size |
/// | `storebackup_uploaded_bytes_total` | counter | bytes published to the destination |
/// | `storebackup_uploaded_bytes_by_kind_total` | counter, `kind` = full/incremental | the same, by kind of backup |
/// | `storebackup_last_success_timestamp_seconds` | gauge | Unix time of the last successful backup |
/// | `storebackup_last_failure_timestamp_seconds` | gauge | Unix time of the last failed backup |
/// | `storebackup_last_point_timestamp_seconds` | gauge | the creation time (Unix) of the newest backup published: the moment a restore can reach |
/// | `storebackup_retention_removed_total` | counter | backups removed by retention |
/// | `storebackup_restores_total` | counter, `outcome` = success/failure | restores attempted |
/// | `storebackup_verifies_total` | counter, `outcome`, `trigger` = drill/after-create | backups verified |
/// | `storebackup_last_verify_success_timestamp_seconds` | gauge | Unix time of the last passing verification |
/// | `storebackup_last_verify_failure_timestamp_seconds` | gauge | Unix time of the last failing verification |
/// | `storebackup_verify_failures_total` | counter, `backup` | verifications that failed, by backup |
/// | `storebackup_compactions_total` | counter, `level` = hourly/daily | merges of an ended hour's or day's points into one |
/// | `storebackup_compacted_bytes_total` | counter, `level` | bytes of the points merged (read from local copies or downloaded) |
/// | `storebackup_compaction_downloaded_bytes_total` | counter | bytes compaction had to download (a local copy was lost) |
/// | `storebackup_points` | gauge, `level` = minute/hourly/daily/full | backups at the destination by level, after retention |
/// | `storebackup_damaged_databases_total` | counter (`store` only) | databases create found failing `PRAGMA integrity_check` in the live store |
///
/// Alert on `time() - storebackup_last_success_timestamp_seconds > 26 * 3600`, and on
/// `time() - storebackup_last_verify_success_timestamp_seconds > 8 * 86400`.
public enum BackupMetrics {
    /// Backups attempted, with `outcome` success or failure.
    public static let backups = "storebackup_backups_total"
    /// Seconds the last backup took (archive and upload).
    public static let duration = "storebackup_backup_duration_seconds"
    /// Size in bytes of the last successful backup.
    public static let archiveSize = "storebackup_backup_size_bytes"
    /// Bytes published to the destination.
    public static let uploadedBytes = "storebackup_uploaded_bytes_total"
    /// Bytes published, by `kind` of backup (full or incremental, docs/incremental-backups.md).
    public static let uploadedBytesByKind = "storebackup_uploaded_bytes_by_kind_total"
    /// Unix time of the last successful backup.
    public static let lastSuccess = "storebackup_last_success_timestamp_seconds"
    /// Unix time of the last failed backup.
    public static let lastFailure = "storebackup_last_failure_timestamp_seconds"
    /// The creation time (Unix) of the newest backup published, full or point: what a restore
    /// reaches. An idle store makes no point, so alert on it beyond
    /// ``IncrementalPolicy/fullScanEvery``.
    public static let lastPoint = "storebackup_last_point_timestamp_seconds"
    /// Merges of an ended hour's or day's points into one, by `level` (docs/levels.md).
    public static let compactions = "storebackup_compactions_total"
    /// Bytes of the points merged, by `level`.
    public static let compactedBytes = "storebackup_compacted_bytes_total"
    /// Bytes compaction downloaded because a local copy was missing.
    public static let compactionDownloadedBytes = "storebackup_compaction_downloaded_bytes_total"
    /// Backups at the destination by `level`, counted after each retention run with levels.
    public static let pointsByLevel = "storebackup_points"
    /// Backups removed by retention.
    public static let retentionRemoved = "storebackup_retention_removed_total"
    /// Restores attempted, with `outcome` success or failure.
    public static let restores = "storebackup_restores_total"

    /// Backups verified, with `outcome` success or failure and `trigger` drill or after-create.
    public static let verifies = "storebackup_verifies_total"
    /// Unix time of the last verification that passed.
    public static let lastVerifySuccess = "storebackup_last_verify_success_timestamp_seconds"
    /// Unix time of the last verification that failed.
    public static let lastVerifyFailure = "storebackup_last_verify_failure_timestamp_seconds"
    /// Verifications that failed, with the `backup` that failed.
    public static let verifyFailures = "storebackup_verify_failures_total"
    /// Databases that create found failing `PRAGMA integrity_check` in the live store (each
    /// backup that finds one counts it again): damage to repair before restore day.
    public static let damagedDatabases = "storebackup_damaged_databases_total"

    static func recordDamagedDatabase(store: String) {
        Counter(label: damagedDatabases, dimensions: [("store", store)]).increment()
    }

    static func recordVerify(store: String, destination: String, backup: String, ok: Bool, trigger: String, at date: Date) {
        let where_ = [("store", store), ("destination", destination)]
        Counter(label: verifies, dimensions: where_ + [("outcome", ok ? "success" : "failure"), ("trigger", trigger)]).increment()
        if ok {
            Gauge(label: lastVerifySuccess, dimensions: where_).record(date.timeIntervalSince1970)
        } else {
            Gauge(label: lastVerifyFailure, dimensions: where_).record(date.timeIntervalSince1970)
            Counter(label: verifyFailures, dimensions: where_ + [("backup", backup)]).increment()
        }
    }

    static func recordCompaction(store: String, destination: String, level: String, mergedBytes: Int64, downloadedBytes: Int64) {
        let where_ = [("store", store), ("destination", destination)]
        Counter(label: compactions, dimensions: where_ + [("level", level)]).increment()
        Counter(label: compactedBytes, dimensions: where_ + [("level", level)]).increment(by: Int(clamping: mergedBytes))
        Counter(label: compactionDownloadedBytes, dimensions: where_).increment(by: Int(clamping: downloadedBytes))
    }

    static func recordPointsByLevel(store: String, destination: String, counts: [String: Int]) {
        for (level, count) in counts {
            Gauge(label: pointsByLevel, dimensions: [("store", store), ("destination", destination), ("level", level)])
                .record(Double(count))
        }
    }

    static func recordPoint(store: String, destination: String, createdAt: Date) {
        Gauge(label: lastPoint, dimensions: [("store", store), ("destination", destination)]).record(createdAt.timeIntervalSince1970)
    }

    static func recordBackup(store: String, destination: String, size: Int64?, seconds: Double, at date: Date, kind: String = "full") {
        let where_ = [("store", store), ("destination", destination)]
        let succeeded = size != nil
        Counter(label: backups, dimensions: where_ + [("outcome", succeeded ? "success" : "failure")]).increment()
        Gauge(label: duration, dimensions: where_).record(seconds)
        if let size {
            Gauge(label: archiveSize, dimensions: where_).record(Double(size))
            Counter(label: uploadedBytes, dimensions: where_).increment(by: Int(clamping: size))
            Counter(label: uploadedBytesByKind, dimensions: where_ + [("kind", kind)]).increment(by: Int(clamping: size))
            Gauge(label: lastSuccess, dimensions: where_).record(date.timeIntervalSince1970)
        } else {
            Gauge(label: lastFailure, dimensions: where_).record(date.timeIntervalSince1970)
        }
    }

    static func recordRestore(store: String, destination: String, succeeded: Bool) {
        Counter(
            label: restores,
            dimensions: [
                ("store", store), ("destination", destination),
                ("outcome", succeeded ? "success" : "failure"),
            ]
        ).increment()
    }

    static func recordRetention(destination: String, removed: Int) {
        guard removed > 0 else { return }
        Counter(label: retentionRemoved, dimensions: [("destination", destination)]).increment(by: removed)
    }
}
