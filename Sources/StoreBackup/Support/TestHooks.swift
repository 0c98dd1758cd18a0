import Foundation

/// Switches that only tests turn on; off (nil) in normal use, and never read from the
/// environment here. Why an `@_spi(Testing)` door rather than `internal`: in-process tests
/// set them through `@testable import`, but the crash tests drive the `storebackup`
/// executable, which cannot use `@testable` in a release build; so the command line reads
/// its `STOREBACKUP_TEST_*` variables and sets these through a narrowly named SPI that
/// stays out of the public API (`import StoreBackup` alone does not see it).
@_spi(Testing) public enum TestHooks {
    /// Called at each named step of create and restore ("create-locked", "extracting",
    /// "between-renames", …) and after each file extract writes ("extract-file-written"),
    /// with the step's name, so a test can stop the process there
    /// (and kill it). nil in normal use: reaching a step then costs one check.
    public static var pausePoint: (@Sendable (String) -> Void)? {
        get { state.withLock { $0.pausePoint } }
        set { state.withLock { $0.pausePoint = newValue } }
    }

    /// A snapshot method every database must use (`backup-api-copy` forces SQLite's
    /// backup API, the fallback); nil lets create choose.
    public static var snapshotMethod: String? {
        get { state.withLock { $0.snapshotMethod } }
        set { state.withLock { $0.snapshotMethod = newValue } }
    }

    /// The clock of ``BackupService`` (its runs, their points and merges) in place of the
    /// system's, so a test driving the executable can cross hours and days; nil in normal use.
    public static var clock: (@Sendable () -> Date)? {
        get { state.withLock { $0.clock } }
        set { state.withLock { $0.clock = newValue } }
    }

    private struct State {
        var pausePoint: (@Sendable (String) -> Void)?
        var snapshotMethod: String?
        var clock: (@Sendable () -> Date)?
    }

    private static let state = Locked(State())
}

/// The named steps of create and restore where a test may stop the process.
enum TestPausePoint {
    static func reach(_ step: String) {
        TestHooks.pausePoint?(step)
    }
}
