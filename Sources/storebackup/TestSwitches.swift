import Foundation
@_spi(Testing) import StoreBackup

/// The test-only environment variables, read here and nowhere in the library: tests that
/// drive this executable set them, and they turn on the library's ``TestHooks``.
enum TestSwitches {
    static func install(from environment: [String: String] = ProcessInfo.processInfo.environment) {
        // Stop at a named step of create or restore, say so, and wait to be killed.
        if let step = environment["STOREBACKUP_TEST_PAUSE_AT"], !step.isEmpty {
            TestHooks.pausePoint = { reached in
                guard reached == step else { return }
                Terminal.info("storebackup: test pause at \(reached)")
                while true { pause() }
            }
        }
        // The service's clock, as Unix seconds (levels tests cross hours and days).
        if let text = environment["STOREBACKUP_TEST_NOW"], let seconds = Double(text) {
            TestHooks.clock = { Date(timeIntervalSince1970: seconds) }
        }
        // Force the snapshot fallback (SQLite's backup API).
        if let method = environment["STOREBACKUP_SNAPSHOT_METHOD"], !method.isEmpty {
            TestHooks.snapshotMethod = method
        }
    }
}
