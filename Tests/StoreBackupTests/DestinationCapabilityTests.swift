import Foundation
import XCTest

@testable import StoreBackup

/// Capabilities are asked of a destination, never found by casting, so wrapping a local
/// folder (retries, or any other wrapper) must not turn it into a remote one: create still
/// builds in place, restore and verify still read the file where it is.
final class DestinationCapabilityTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("capability")
        try StoreFixture.make(at: store, logRows: 2_000)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func testWrappedLocalFolderBuildsInPlaceAndIsReadInPlace() async throws {
        let calls = DestinationCalls()
        // Two wrappers deep: a wrapper of our own inside the library's retrying one.
        let destination = RetryingDestination(RecordingDestination(base: LocalFolderDestination(folder: backups), calls: calls))
        let helper = StoreHelper(storesDirectory: store, destination: destination)

        let created = try await helper.createBackup()
        let uploaded = await calls.uploadedFiles
        XCTAssertEqual(uploaded.count, 1)
        XCTAssertEqual(
            uploaded.first.map(FileSystem.parentDirectory(of:)), backups,
            "the archive is built inside the wrapped local folder, so publishing is a rename")
        XCTAssertEqual(destination.localPath(of: created.name), backups + "/" + created.name)
        XCTAssertNil(destination.localPath(of: "2001-01-01 000000 Stores.zip"))

        let verified = try await helper.repository.verify()
        XCTAssertEqual(verified.first?.ok, true, verified.first?.problem ?? "")
        let restored = try await helper.restore(created.name)
        XCTAssertEqual(restored.backupName, created.name)
        let downloads = await calls.downloads
        XCTAssertEqual(downloads, 0, "verify and restore read a local backup in place through the wrappers")
    }

    func testRemoteDestinationsHaveNoLocalCapabilities() throws {
        // Resolved as the command line does: wrapped in retries. Nothing is sent over the network.
        let s3 = try DestinationResolver.resolve(
            "s3://bucket/prefix",
            options: DestinationOptions(
                s3Endpoint: "http://127.0.0.1:9",
                environment: ["AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret", "HOME": work]))
        XCTAssertNil(s3.localPath(of: "2026-11-22 031507 Stores.zip"))
        XCTAssertNil(try s3.prepareInPlaceArchive())
    }

    /// Ranged reads (`ls` and `extract` of a remote backup) are a capability like the others:
    /// every wrapper passes it through, and a destination without it answers nil.
    func testRangeReadersPassThroughWrappers() async throws {
        let helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let created = try await helper.createBackup()
        let file = try Data(contentsOf: URL(fileURLWithPath: backups + "/" + created.name))
        let wrapped = RetryingDestination(RecordingDestination(base: LocalFolderDestination(folder: backups), calls: DestinationCalls()))
        let reader = try XCTUnwrap(wrapped.rangeReader(of: created.name, size: Int64(file.count)))
        XCTAssertEqual(reader.size, Int64(file.count))
        let cancel = CancellationFlag()
        XCTAssertEqual(try reader.read(100..<4196, cancel: cancel), file[100..<4196])
        XCTAssertEqual(try reader.read(Int64(file.count - 10)..<Int64(file.count), cancel: cancel), file.suffix(10))
        // Beyond the backup, or more than one request may carry: refused before any read.
        XCTAssertThrowsError(try reader.read(Int64(file.count - 10)..<Int64(file.count + 1), cancel: cancel))
        XCTAssertThrowsError(try reader.read(0..<(BackupRangeReader.maxReadBytes + 1), cancel: cancel))

        let s3 = try DestinationResolver.resolve(
            "s3://bucket/prefix",
            options: DestinationOptions(
                s3Endpoint: "http://127.0.0.1:9",
                environment: ["AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret", "HOME": work]))
        XCTAssertNotNil(s3.rangeReader(of: created.name, size: 1000), "resolved as the command line does, wrapped in retries")
        XCTAssertNil(s3.rangeReader(of: "../not a backup", size: 1000))
        XCTAssertNil(ListOnlyDestination().rangeReader(of: created.name, size: 1000), "none unless a destination has them")
    }

    func testPreparingInPlaceCreatesTheFolderAndSweepsDeadTemporaries() throws {
        let local = LocalFolderDestination(folder: backups)
        XCTAssertFalse(FileSystem.isDirectory(backups))
        let first = try XCTUnwrap(try local.prepareInPlaceArchive())
        XCTAssertTrue(FileSystem.isDirectory(backups))
        XCTAssertEqual(FileSystem.parentDirectory(of: first), backups)
        XCTAssertFalse(FileSystem.fileExists(first), "only a name: nothing is built yet")
        // A temporary of a process that is gone is removed; the folder holds nothing else.
        let dead = backups + "/.storebackup-tmp-999999999-archive-0.zip"
        XCTAssertTrue(FileManager.default.createFile(atPath: dead, contents: Data("partial".utf8)))
        _ = try local.prepareInPlaceArchive()
        XCTAssertFalse(FileSystem.fileExists(dead))

        // A folder that cannot be made is an error, not a silent build elsewhere.
        let blocked = LocalFolderDestination(folder: store + "/Settings.sqlite/backups")
        XCTAssertThrowsError(try blocked.prepareInPlaceArchive())
    }

    // MARK: the helpers every backend shares

    func testHTTPDatesReadEveryFormTheBackendsMeet() {
        let expected = Date(timeIntervalSince1970: 784_111_777)  // 1994-11-06 08:49:37 UTC
        XCTAssertEqual(HTTPDates.iso8601("1994-11-06T08:49:37Z"), expected)
        XCTAssertEqual(HTTPDates.iso8601("1994-11-06T08:49:37.250Z")?.timeIntervalSince1970, 784_111_777.25)
        XCTAssertEqual(HTTPDates.http("Sun, 06 Nov 1994 08:49:37 GMT"), expected)
        XCTAssertEqual(HTTPDates.http("Sunday, 06-Nov-94 08:49:37 GMT"), expected)
        XCTAssertEqual(HTTPDates.http("Sun Nov  6 08:49:37 1994"), expected)
        XCTAssertEqual(HTTPDates.iso8601("1994-11-06T10:49:37+02:00"), expected)
        XCTAssertEqual(HTTPDates.iso8601("1994-11-06T03:49:37-0500"), expected)
        XCTAssertNil(HTTPDates.iso8601("yesterday"))
        XCTAssertNil(HTTPDates.iso8601("1994-11-06T08:49:37"), "no zone")
        XCTAssertNil(HTTPDates.iso8601("1994-02-30T08:49:37Z"), "no such day")
        XCTAssertNil(HTTPDates.iso8601("1994-11-06T08:49:37Zjunk"))
        XCTAssertNil(HTTPDates.http("1994-11-06T08:49:37Z"))
        XCTAssertNil(HTTPDates.http("Sun, 06 Foo 1994 08:49:37 GMT"))
        XCTAssertNil(HTTPDates.http("Sun, 06 Nov 1994 08:49:37 CET"))
        // A two-digit year is the latest one not more than 50 years ahead.
        let in2026 = Date(timeIntervalSince1970: 1_795_000_000)
        XCTAssertEqual(HTTPDates.http("Friday, 06-Nov-76 08:49:37 GMT", now: in2026).map(UTCTimestamp.fields)?.year, 2076)
        XCTAssertEqual(HTTPDates.http("Saturday, 06-Nov-77 08:49:37 GMT", now: in2026).map(UTCTimestamp.fields)?.year, 1977)
    }

    func testCompleteLengthReadsBothContentRangeForms() {
        func response(_ range: String?) -> TransferResponse {
            TransferResponse(status: 416, headers: range.map { ["content-range": $0] } ?? [:], body: Data(), bytesReceived: 0)
        }
        XCTAssertEqual(ContentRange.completeLength(of: response("bytes */1000")), 1000)
        XCTAssertEqual(ContentRange.completeLength(of: response("bytes 0-9/1000")), 1000)
        XCTAssertNil(ContentRange.completeLength(of: response("bytes 0-9/*")))
        XCTAssertNil(ContentRange.completeLength(of: response(nil)))
        // A server's header is untrusted: negative or inconsistent values are not a range.
        XCTAssertNil(ContentRange.completeLength(of: response("bytes */-1")))
        XCTAssertNil(ContentRange("bytes 5--3/10"))
        XCTAssertNil(ContentRange("bytes 9-5/10"))
        XCTAssertNil(ContentRange("bytes 0-9/5"))
        XCTAssertEqual(ContentRange("bytes 0-9/10")?.total, 10)
        XCTAssertEqual(ContentRange("bytes 5-9/*")?.total, nil)
        XCTAssertEqual(ContentRange("bytes 5-9/10")?.first, 5)
    }
}

/// What a ``RecordingDestination`` saw.
private actor DestinationCalls {
    var uploadedFiles: [String] = []
    var downloads = 0
    func uploaded(_ file: String) { uploadedFiles.append(file) }
    func downloaded() { downloads += 1 }
}

/// A wrapper that overrides only what it records; everything else, capabilities included,
/// is forwarded by ``WrappingDestination``'s defaults.
private struct RecordingDestination: WrappingDestination {
    let base: any BackupDestination
    let calls: DestinationCalls

    func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        await calls.uploaded(file)
        try await base.upload(file: file, as: name, progress: progress)
    }

    func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        await calls.downloaded()
        try await base.download(name, to: file, progress: progress)
    }
}

/// A destination of one's own with only the four operations: no capabilities.
private struct ListOnlyDestination: BackupDestination {
    var displayName: String { "list-only" }
    func listBackups() async throws -> [BackupListing] { [] }
    func upload(file: String, as name: String, progress: ProgressHandler?) async throws {}
    func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {}
    func delete(_ name: String) async throws {}
}
