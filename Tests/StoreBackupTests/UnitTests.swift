import Foundation
import XCTest
@testable import StoreBackup

final class BackupNameTests: XCTestCase {
    func testNamesAreSortableUTCToTheSecond() {
        let date = Date(timeIntervalSince1970: 1_795_317_307)  // 2026-11-22 03:15:07 UTC
        XCTAssertEqual(BackupName.make(for: date), "2026-11-22 031507 Stores.zip")
        XCTAssertEqual(BackupName.date(of: "2026-11-22 031507 Stores.zip"), date)
    }

    func testSeedNamingIsUnderstood() throws {
        let date = try XCTUnwrap(BackupName.date(of: "[2026-Nov-21] 10.15 PM Stores.zip"))
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        XCTAssertEqual([parts.year, parts.month, parts.day, parts.hour, parts.minute], [2026, 11, 21, 22, 15])
    }

    /// The hand-written calendar arithmetic agrees with Foundation's formatters on seeded
    /// random instants from 1970 to 9999, and refuses what a strict reading refuses.
    func testUTCTimestampsMatchFoundation() {
        let compact = DateFormatter()
        compact.locale = Locale(identifier: "en_US_POSIX")
        compact.timeZone = TimeZone(identifier: "UTC")
        compact.dateFormat = "yyyy-MM-dd HHmmss"
        let iso = ISO8601DateFormatter()
        var generator = SplitMix64(seed: 20261126)
        let edges: [TimeInterval] = [0, 951_782_400, 4_107_542_399, 253_402_300_799, 1_795_317_307.75]
        for seconds in edges + (0..<2000).map({ _ in TimeInterval(Int.random(in: 0...253_402_300_799, using: &generator)) }) {
            let date = Date(timeIntervalSince1970: seconds)
            let text = UTCTimestamp.compact(date)
            XCTAssertEqual(text, compact.string(from: date), "\(seconds)")
            XCTAssertEqual(UTCTimestamp.iso8601(date), iso.string(from: date), "\(seconds)")
            XCTAssertEqual(UTCTimestamp.parseCompact(Substring(text)), Date(timeIntervalSince1970: seconds.rounded(.down)), text)
        }
        for valid in ["2000-02-29 000000", "2024-02-29 235959", "0001-01-01 000000"] {
            XCTAssertNotNil(UTCTimestamp.parseCompact(Substring(valid)), valid)
        }
        for invalid in ["2025-02-29 120000", "2100-02-29 120000", "2026-04-31 000000", "2026-11-22 240000",
                        "2026-11-22 036000", "2026-11-22 031560", "0000-01-01 000000", "2026-1-22 0315070",
                        "2026-11-22T031507", "2026-11-22 03150", "+026-11-22 031507", "２026-11-22 031507"] {
            XCTAssertNil(UTCTimestamp.parseCompact(Substring(invalid)), invalid)
        }
    }

    func testOnlyStoresZipNamesAreBackups() {
        XCTAssertTrue(BackupName.isBackup("anything Stores.zip"))
        XCTAssertFalse(BackupName.isBackup("Stores.zip"))
        XCTAssertFalse(BackupName.isBackup(".storebackup-tmp-1 Stores.zip"))
        XCTAssertFalse(BackupName.isBackup("2026 Stores.zip.partial"))
        XCTAssertThrowsError(try BackupName.validate("../x Stores.zip"))
    }
}

final class ArchivePathTests: XCTestCase {
    func testUnsafePathsAreRecognised() {
        for path in ["a/b.txt", ".hidden/x", "a/.b/c"] { XCTAssertTrue(ArchiveReader.isSafeRelativePath(path), path) }
        // A backslash is an ordinary character of a Linux name (issue 32).
        for path in ["...", "a/...", "a/.b.", "..a", "é/ü", "a\\b", "..\\x"] { XCTAssertTrue(ArchiveReader.isSafeRelativePath(path), path) }
        for path in ["", "/abs", "../x", "a/../../x", "a//b", "./a", "a/..", "x\0y", "a/", ".", "..", "a/./b"] {
            XCTAssertFalse(ArchiveReader.isSafeRelativePath(path), path)
        }
    }

    func testLinksMustStayInside() {
        XCTAssertTrue(ArchiveReader.isContainedLink(linkPath: "a/link", target: "../notes.txt"))
        XCTAssertTrue(ArchiveReader.isContainedLink(linkPath: "link", target: "sub/file"))
        XCTAssertFalse(ArchiveReader.isContainedLink(linkPath: "a/link", target: "../../etc/passwd"))
        XCTAssertFalse(ArchiveReader.isContainedLink(linkPath: "link", target: "/etc/passwd"))
        XCTAssertFalse(ArchiveReader.isContainedLink(linkPath: "link", target: ".."))
    }

    func testExtendedTimestampRoundTrips() {
        XCTAssertEqual(ZipTimestamp.decode(ZipTimestamp.encode(modificationTime: 1_600_000_001)), 1_600_000_001)
        XCTAssertNil(ZipTimestamp.decode([0x00, 1, 2, 3, 4]))
    }

    func testCompressionLevelsParse() {
        XCTAssertEqual(CompressionLevel.parse("fast"), 1)
        XCTAssertEqual(CompressionLevel.parse("best"), 9)
        XCTAssertEqual(CompressionLevel.parse("0"), 0)
        XCTAssertNil(CompressionLevel.parse("10"))
        XCTAssertNil(CompressionLevel.parse("quick"))
    }

    func testDestinationResolution() throws {
        XCTAssertEqual((try DestinationResolver.resolve("file:///var/backups") as? LocalFolderDestination)?.folder, "/var/backups")
        XCTAssertEqual(DestinationResolver.defaultFolder(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]), "/x/storebackup/backups")
        XCTAssertEqual(DestinationResolver.defaultFolder(environment: ["HOME": "/h"]), "/h/.local/share/storebackup/backups")
        XCTAssertThrowsError(try DestinationResolver.resolve("ftp://host/x"))
    }
}

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
