import Foundation
import XCTest

@_spi(Testing) @testable import StoreBackup

/// Acceptance: cancelling leaves no partial backup, no temporary files, and an untouched store.
final class CancellationTests: XCTestCase {
    func testCancellingCreateMidwayLeavesNothingBehind() async throws {
        let work = try TestEnvironment.temporaryDirectory("cancel")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores", backups = work + "/backups"
        try StoreFixture.make(at: store, logRows: 60_000)
        let before = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))

        let sawProgress = CallLog()
        let canceller = TaskCanceller()
        let task = Task<BackupResult, Error> {
            try await helper.createBackup(progress: { progress in
                // Runs on a worker thread: cancel the task from here, midway through archiving.
                if progress.phase == .archiving && progress.bytesDone > 0 && sawProgress.entries.isEmpty {
                    sawProgress.append("archiving")
                    canceller.cancel()
                }
            })
        }
        canceller.attach { task.cancel() }
        do {
            _ = try await task.value
            XCTFail("create should have been cancelled")
        } catch StoreBackupError.cancelled {
        }
        XCTAssertEqual(sawProgress.entries, ["archiving"], "cancelled while archiving")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backups), [], "no backup and no temporary file")
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false), before)
        XCTAssertEqual(try StoreFixture.query(store + "/App.sqlite", "PRAGMA integrity_check"), "ok")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
            .filter { $0.hasPrefix(".storebackup-\(getpid())-") || $0.hasPrefix(".storebackup-tmp-\(getpid())-") }
        XCTAssertEqual(leftovers, [])
    }

    /// Cancelled once its first file is written (the test pause point after each file),
    /// extract throws `cancelled` and leaves nothing: no target folder, no scratch folder
    /// beside it, nothing in TMPDIR, and the store untouched.
    func testCancellingExtractAfterItsFirstFileLeavesNothingBehind() async throws {
        let work = try TestEnvironment.temporaryDirectory("cancel-extract")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores", backups = work + "/backups", into = work + "/out/Extracted"
        try StoreFixture.make(at: store, logRows: 200, blobCount: 4)
        try FileManager.default.createDirectory(atPath: work + "/out", withIntermediateDirectories: true)
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        _ = try await helper.createBackup()
        let before = try StoreFixture.describe(store, includeJournals: false)

        let written = CallLog()
        let canceller = TaskCanceller()
        TestHooks.pausePoint = { step in
            guard step == "extract-file-written" else { return }
            written.append(step)
            canceller.cancel()  // from the first file on (once is enough; again is harmless)
        }
        defer { TestHooks.pausePoint = nil }
        let task = Task<ExtractResult, Error> { try await helper.repository.extract("latest", into: into) }
        canceller.attach { task.cancel() }
        do {
            let result = try await task.value
            XCTFail("extract should have been cancelled, it wrote \(result.entryCount) entries")
        } catch StoreBackupError.cancelled {
        }
        XCTAssertGreaterThanOrEqual(written.entries.count, 1, "cancelled after a file was written")
        XCTAssertFalse(FileManager.default.fileExists(atPath: into), "no target folder")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/out"), [], "no scratch folder beside the target")
        XCTAssertEqual(try StoreFixture.describe(store, includeJournals: false), before, "the store is untouched")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
            .filter { $0.hasPrefix(".storebackup-\(getpid())-") || $0.hasPrefix(".storebackup-tmp-\(getpid())-") }
        XCTAssertEqual(leftovers, [])
    }
}

/// Cancels a task from any thread, even if asked before the task was attached.
final class TaskCanceller: @unchecked Sendable {
    private let lock = NSLock()
    private var action: (@Sendable () -> Void)?
    private var requested = false

    func attach(_ cancel: @escaping @Sendable () -> Void) {
        let runNow: Bool = lock.withLock {
            action = cancel; return requested
        }
        if runNow { cancel() }
    }

    func cancel() {
        let current: (@Sendable () -> Void)? = lock.withLock {
            requested = true; return action
        }
        current?()
    }
}
