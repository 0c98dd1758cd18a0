import Foundation
import XCTest

@testable import StoreBackup

/// Recovery on hand-made folder states: each journal phase with the folders a crash leaves.
final class RecoveryTests: XCTestCase {
    var work = ""
    var layout: StoreLayout { StoreLayout(storesDirectory: work + "/Stores") }

    override func setUpWithError() throws { work = try TestEnvironment.temporaryDirectory("recovery") }
    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: work) }

    private func makeFolder(_ path: String, marker: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try marker.write(toFile: path + "/marker", atomically: false, encoding: .utf8)
    }

    private func marker(_ path: String) -> String? { try? String(contentsOfFile: path + "/marker", encoding: .utf8) }

    private func journal(_ phase: RestoreJournal.Phase, hadLive: Bool = true) throws {
        try RestoreJournal(phase: phase, backupName: "b Stores.zip", hadLiveStore: hadLive).save(to: layout.journal)
    }

    func testCrashMidSwapPutsTheOldStoreBack() throws {
        try makeFolder(layout.old, marker: "old")
        try makeFolder(layout.new, marker: "new")
        try journal(.swapping)
        XCTAssertEqual(try RestoreTransaction.recover(layout), .rolledBack(backup: "b Stores.zip"))
        XCTAssertEqual(marker(layout.live), "old")
        XCTAssertFalse(FileSystem.fileExists(layout.new))
        XCTAssertFalse(FileSystem.fileExists(layout.journal))
    }

    /// A crash while the app reloads is not the app rejecting the store: the old store is put
    /// back, and the unaccepted copy is discarded (the backup it came from still exists), so
    /// interrupted restores leave no _FailedRestore behind.
    func testCrashDuringReloadRollsBackAndDiscardsTheUnacceptedCopy() throws {
        try makeFolder(layout.live, marker: "new")
        try makeFolder(layout.old, marker: "old")
        try journal(.reloading)
        _ = try RestoreTransaction.recover(layout)
        XCTAssertEqual(marker(layout.live), "old")
        XCTAssertFalse(FileSystem.fileExists(layout.failed))
        XCTAssertFalse(FileSystem.fileExists(layout.old))
        XCTAssertFalse(FileSystem.fileExists(layout.journal))
        let beside = try FileManager.default.contentsOfDirectory(atPath: layout.parent)
        XCTAssertEqual(beside.filter { $0.hasPrefix(ScratchFiles.prefix) }, [], "the discarded copy is gone, not parked")
    }

    func testCrashDuringExtractionDiscardsTheHalfMadeFolder() throws {
        try makeFolder(layout.live, marker: "old")
        try makeFolder(layout.new, marker: "half")
        try journal(.extracting)
        XCTAssertEqual(try RestoreTransaction.recover(layout), .discardedUnfinishedRestore(backup: "b Stores.zip"))
        XCTAssertEqual(marker(layout.live), "old")
        XCTAssertFalse(FileSystem.fileExists(layout.new))
    }

    func testCrashAfterSuccessOnlyFinishesCleanup() throws {
        try makeFolder(layout.live, marker: "new")
        try makeFolder(layout.old, marker: "old")
        try journal(.committing)
        XCTAssertEqual(try RestoreTransaction.recover(layout), .finishedCleanup(backup: "b Stores.zip"))
        XCTAssertEqual(marker(layout.live), "new")
        XCTAssertFalse(FileSystem.fileExists(layout.old))
    }

    func testRestoreOntoAFreshMachineCompletesForward() throws {
        try makeFolder(layout.new, marker: "new")
        try journal(.swapping, hadLive: false)
        XCTAssertEqual(try RestoreTransaction.recover(layout), .completedRestore(backup: "b Stores.zip"))
        XCTAssertEqual(marker(layout.live), "new")
    }

    func testRecoveryIsIdempotent() throws {
        try makeFolder(layout.live, marker: "new")
        try makeFolder(layout.old, marker: "old")
        try journal(.rollingBack)
        _ = try RestoreTransaction.recover(layout)
        XCTAssertEqual(try RestoreTransaction.recover(layout), .nothingToDo)
        XCTAssertEqual(marker(layout.live), "old")
    }
}
