import Foundation
import XCTest

@testable import StoreBackup

/// Issue 36 point 1: a restore from a remote destination downloads the backup with several
/// ranged requests into its staging file and unpacks it as it arrives. On S3 (rclone),
/// WebDAV (Apache), SFTP (OpenSSH) and the Dropbox emulator, through faults (a lost answer,
/// a connection reset in the middle of a range, rclone's 200 for a range, one range answered
/// with the whole backup, a server that ignores every range), the restored tree is exactly
/// the store that was backed up, nothing is left behind, and the bytes the server side sent
/// (the fault proxy's log, the emulator's log) are the backup's, once, plus what the faults
/// cost; a server that ignores ranges gets today's whole download instead.
final class StreamingRestoreTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var local: String { work + "/local" }
    var backupName = ""
    var archiveSize: Int64 = 0
    var reference: [String: StoreFixture.Node] = [:]
    var restores = 0

    /// Quick retries, so the faults below heal within the test.
    static let retry = RetryPolicy(budget: 60, initialDelay: 0.02, maximumDelay: 0.1)

    /// The chunks a streamed download of the backup asks for (over HTTP; SFTP asks for larger ones).
    var chunks: Int { Int((archiveSize + Self.chunkBytes - 1) / Self.chunkBytes) }
    static let chunkBytes: Int64 = 2 << 20

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("streaming")
        try StoreFixture.make(at: store, logRows: 300, blobCount: 6)
        // Incompressible, so the archive spans several chunks, even over SFTP (8 MiB each).
        var generator = SplitMix64(seed: 3601)
        for index in 0..<3 {
            var blob = Data(capacity: 10 << 20)
            for _ in 0..<((10 << 20) / 8) { withUnsafeBytes(of: generator.next()) { blob.append(contentsOf: $0) } }
            try blob.write(to: URL(fileURLWithPath: store + "/.App_SUPPORT/_EXTERNAL_DATA/large-\(index)"))
        }
        let created = try runStoreBackup(["create", store, "--to", local], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        archiveSize = Int64(try FileSystem.lstatInfo(local + "/" + backupName).st_size)
        XCTAssertGreaterThan(archiveSize, 3 * (8 << 20))
        reference = try StoreFixture.describe(store)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    // MARK: destinations

    func testS3() async throws {
        let servers = try TestServers(label: "streaming-s3")
        defer { servers.stop() }
        try await checkHTTP(ContractBackend.s3(try servers.start("s3"), work: work), servers: servers)
    }

    func testWebDAV() async throws {
        let servers = try TestServers(label: "streaming-webdav")
        defer { servers.stop() }
        try await checkHTTP(ContractBackend.webDAV(try servers.start("webdav"), work: work), servers: servers)
    }

    func testSFTP() async throws {
        let servers = try TestServers(label: "streaming-sftp")
        defer { servers.stop() }
        let backend = try ContractBackend.sftp(try servers.start("sftp"), work: work)
        try await upload(to: backend)
        // In TCP mode each connection is one request (libcurl connects for each transfer);
        // SSH's own bytes (key exchange, authentication, framing) come on top of the data.
        func served(_ rules: [[String: Any]]) async throws -> (bytes: Int64, connections: Int) {
            let proxy = try ContractProxy(servers: servers, backend: backend, rules: rules, work: work)
            try await restoreAndCompare(try backend.make("streaming", proxy.port, Self.retry), label: "sftp")
            let entries = proxy.entries { ContractProxy.faults($0).count >= rules.count }
            XCTAssertEqual(ContractProxy.faults(entries).count, rules.count, "[sftp] the fault struck: \(entries)")
            return (RangedReadTests.downBytes(entries), entries.count)
        }
        let sshAllowance = Int64(chunks + 4) * (64 << 10)
        let plain = try await served([])
        XCTAssertGreaterThanOrEqual(plain.connections, Int((archiveSize + (8 << 20) - 1) / (8 << 20)), "[sftp] one read per chunk")
        XCTAssertLessThanOrEqual(plain.bytes, archiveSize + sshAllowance, "[sftp] each byte once")
        // A connection cut in the middle of a chunk, and one cut at once.
        let cut = try await served([
            ["requests": [3], "fault": "reset", "phase": "response", "after_bytes": 200_000],
            ["requests": [5], "fault": "reset", "phase": "response", "after_bytes": 0],
        ])
        XCTAssertLessThanOrEqual(cut.bytes, archiveSize + 200_000 + 2 * sshAllowance, "[sftp] resets")
    }

    func testDropbox() async throws {
        let emulator = try DropboxEmulatorClient(label: "streaming-dropbox")
        defer { emulator.stop() }
        let backend = ContractBackend.dropboxBackend(emulator, work: work)
        try await upload(to: backend)
        let destination = try backend.make("streaming", nil, Self.retry)
        // The emulator's own log counts what each download answer carried.
        func served(faults: [String: Any]) async throws -> (bytes: Int64, faults: Int, requests: Int) {
            try emulator.control("faults", faults)
            defer { _ = try? emulator.control("faults", [:]) }
            let before = try emulator.log().count
            try await restoreAndCompare(destination, label: "dropbox")
            let downloads = try emulator.log().dropFirst(before).filter { $0["route"] as? String == "/2/files/download" }
            return (
                downloads.reduce(0) { $0 + ((($1["bytes_out"] as? NSNumber)?.int64Value) ?? 0) },
                downloads.filter { $0["fault"] is String }.count, downloads.count
            )
        }
        let plain = try await served(faults: [:])
        XCTAssertGreaterThanOrEqual(plain.requests, chunks / 4, "[dropbox] ranged requests")
        XCTAssertEqual(plain.bytes, archiveSize, "[dropbox] each byte once")
        let only = ["routes": ["/2/files/download"], "count": 1] as [String: Any]
        for kind in ["drop", "truncate"] {
            let faulty = try await served(faults: only.merging(["kinds": [kind]]) { $1 })
            XCTAssertEqual(faulty.faults, 1, "[dropbox] \(kind)")
            XCTAssertLessThanOrEqual(faulty.bytes, archiveSize + (8 << 20), "[dropbox] \(kind)")
        }
        // A server that answers every download with the whole file: downloaded as before.
        let whole = try await served(faults: ["routes": ["/2/files/download"], "kinds": ["ignore_range"]])
        XCTAssertGreaterThan(whole.faults, 0, "[dropbox] ignored ranges")
        XCTAssertGreaterThanOrEqual(whole.bytes, archiveSize, "[dropbox] ignored ranges: downloaded")
    }

    /// An incremental backup is fetched in ranges too, then restored with its chain once
    /// its download is complete, the chain's full unpacked while it arrives in ranges: the
    /// store as the incremental saw it, each byte downloaded once. A range of the full
    /// answered whole: the chain is downloaded as before, and restores all the same.
    func testIncrementalBackupRestoresItsChain() async throws {
        let servers = try TestServers(label: "streaming-chain")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let helper = ChainedHelper(StoreHelper(storesDirectory: store, destination: try backend.make("chain", nil, Self.retry)))
        let full = try await helper.createBackup()
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute("UPDATE accounts SET balance = balance + 7 WHERE id = 1", operation: "update")
        app.close()
        let incremental = try await helper.createBackup()
        XCTAssertEqual(incremental.base, full.name)
        reference = try StoreFixture.describe(store)
        backupName = incremental.name
        func served(_ rules: [[String: Any]]) async throws -> [[String: Any]] {
            let proxy = try ContractProxy(servers: servers, backend: backend, rules: rules, work: work)
            try await restoreAndCompare(try backend.make("chain", proxy.port, Self.retry), label: "chain")
            return proxy.entries().filter { ($0["request"] as? String)?.hasPrefix("GET") == true }
                .filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
        }
        let gets = try await served([])
        // The incremental in one range (it is small), the full in ranges of at most 8 MiB.
        let fullRanges = (full.size + BackupRangeReader.maxReadBytes - 1) / BackupRangeReader.maxReadBytes
        XCTAssertGreaterThanOrEqual(Int64(gets.count), 1 + fullRanges, "\(gets)")
        XCTAssertEqual(RangedReadTests.downBytes(gets), incremental.size + full.size, "each byte once")

        let fullGET: [String: Any] = ["method": "GET", "path_contains": full.name.replacingOccurrences(of: " ", with: "%20")]
        let answeredWhole = try await served([fullGET.merging(["requests": [2], "fault": "norange"]) { $1 }])
        XCTAssertEqual(ContractProxy.faults(answeredWhole).count, 1, "one range of the full answered whole")
        XCTAssertGreaterThanOrEqual(RangedReadTests.downBytes(answeredWhole), incremental.size + full.size)
    }

    /// libzip's check of every local header against the central directory, which a local
    /// restore makes when it opens the archive, is made of the whole downloaded file before
    /// the swap: a folder entry whose local header names another folder (no restore step
    /// reads it otherwise) fails the restore, and the live store is left alone.
    func testInconsistentLocalHeaderFailsBeforeTheSwap() async throws {
        let servers = try TestServers(label: "streaming-hostile")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        var archive = try Data(contentsOf: URL(fileURLWithPath: local + "/" + backupName))
        let descriptor = open(local + "/" + backupName, O_RDONLY | O_CLOEXEC)
        let layout = try CentralDirectoryCheck(path: local, backupName: backupName).run(
            FileArchiveBytes(descriptor: descriptor, size: archiveSize))
        close(descriptor)
        let header = Int(try XCTUnwrap(layout.offsets.first))
        XCTAssertEqual(Array(archive[header..<header + 4]), [0x50, 0x4B, 0x03, 0x04])
        let nameLength = Int(archive[header + 26]) | Int(archive[header + 27]) << 8
        XCTAssertEqual(archive[header + 30 + nameLength - 1], UInt8(ascii: "/"), "the first entry is a folder")
        archive[header + 30] ^= 0x01
        let copy = work + "/damaged.zip"
        try archive.write(to: URL(fileURLWithPath: copy))
        try await backend.make("streaming", nil, Self.retry).upload(file: copy, as: backupName, progress: nil)
        let target = work + "/Live"
        try StoreFixture.make(at: target, logRows: 10, blobCount: 1)
        let before = try StoreFixture.describe(target)
        do {
            _ = try await StoreHelper(storesDirectory: target, destination: try backend.make("streaming", nil, Self.retry))
                .restore(backupName)
            XCTFail("restored an archive whose local header disagrees with its central directory")
        } catch StoreBackupError.corruptArchive(let name, _) {
            XCTAssertEqual(name, backupName)
        }
        XCTAssertEqual(try StoreFixture.describe(target), before)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target + "_New"))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix(".storebackup-") }, [])
    }

    /// A download that fails for good (every range after the first answered 500 past the
    /// retry budget) fails the restore before the live store is touched: the store is as it
    /// was, and no `_New` or staging file is left.
    func testFailedDownloadLeavesTheStoreAlone() async throws {
        let servers = try TestServers(label: "streaming-failed")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        try await upload(to: backend)
        let proxy = try ContractProxy(
            servers: servers, backend: backend,
            rules: [["method": "GET", "path_contains": "Stores.zip", "requests": Array(3...400), "fault": "500"]], work: work)
        let quick = RetryPolicy(budget: 1, initialDelay: 0.02, maximumDelay: 0.1)
        let target = work + "/Live"
        try StoreFixture.make(at: target, logRows: 10, blobCount: 1)
        let before = try StoreFixture.describe(target)
        let helper = StoreHelper(storesDirectory: target, destination: try backend.make("streaming", proxy.port, quick))
        do {
            _ = try await helper.restore(backupName)
            XCTFail("restored from a server that fails")
        } catch StoreBackupError.transfer(let failure) {
            XCTAssertTrue(failure.message.contains("500"), failure.message)
        }
        XCTAssertEqual(try StoreFixture.describe(target), before)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target + "_New"))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix(".storebackup-") }, [])
    }

    // MARK: the scenarios over HTTP

    /// S3 and WebDAV through the HTTP fault proxy, which logs each answer's body bytes.
    private func checkHTTP(_ backend: ContractBackend, servers: TestServers) async throws {
        try await upload(to: backend)
        let label = backend.label
        func served(_ rules: [[String: Any]]) async throws -> (bytes: Int64, faults: [String], gets: Int) {
            let proxy = try ContractProxy(servers: servers, backend: backend, rules: rules, work: work)
            try await restoreAndCompare(try backend.make("streaming", proxy.port, Self.retry), label: label)
            let entries = proxy.entries().filter { ($0["request"] as? String)?.hasPrefix("GET") == true }
                .filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
            return (RangedReadTests.downBytes(entries), ContractProxy.faults(entries), entries.count)
        }
        let plain = try await served([])
        // A chunk a reader waits for alone, the others up to four to a request.
        XCTAssertGreaterThanOrEqual(plain.gets, chunks / 4, "[\(label)] ranged requests")
        XCTAssertLessThanOrEqual(plain.gets, chunks, "[\(label)] ranged requests")
        XCTAssertEqual(plain.bytes, archiveSize, "[\(label)] each byte once")

        let zipGET: [String: Any] = ["method": "GET", "path_contains": "Stores.zip"]
        // An answer lost after the server sent it, and a connection cut in the middle of a range.
        let faulty = try await served([
            zipGET.merging(["requests": [2], "fault": "reset", "phase": "before_response"]) { $1 },
            zipGET.merging(["requests": [4], "fault": "reset", "phase": "response", "after_bytes": 100_000]) { $1 },
        ])
        XCTAssertEqual(faulty.faults.count, 2, "[\(label)] faults")
        XCTAssertLessThanOrEqual(faulty.bytes, archiveSize + 100_000 + 65536, "[\(label)] faults: only the lost bytes again")
        // rclone's way: 200 with the Content-Range and only the range.
        let range200 = try await served([zipGET.merging(["fault": "range200"]) { $1 }])
        XCTAssertFalse(range200.faults.isEmpty, "[\(label)] 200 for a range")
        XCTAssertEqual(range200.bytes, archiveSize, "[\(label)] 200 for a range")
        // One range, in the middle of the download, answered with 200 and the whole backup:
        // what was unpacked is discarded and the backup downloaded as before.
        let one = try await served([zipGET.merging(["requests": [3], "fault": "norange"]) { $1 }])
        XCTAssertEqual(one.faults.count, 1, "[\(label)] one range answered whole")
        XCTAssertGreaterThanOrEqual(one.bytes, archiveSize, "[\(label)] one range answered whole: downloaded")
        XCTAssertLessThanOrEqual(one.bytes, 3 * archiveSize, "[\(label)] one range answered whole")
        // A server (or a cache in front of it) that drops every Range header: the first
        // answer is the whole backup, too large to take for a range, so it is downloaded.
        let ignored = try await served([zipGET.merging(["fault": "norange"]) { $1 }])
        XCTAssertFalse(ignored.faults.isEmpty, "[\(label)] ignored ranges")
        XCTAssertGreaterThanOrEqual(ignored.bytes, archiveSize, "[\(label)] ignored ranges: downloaded")
    }

    // MARK: helpers

    /// Restores the backup from `destination` into a new stores directory and compares it
    /// with the store backed up: every file, folder, link, mode, time and database row.
    private func restoreAndCompare(
        _ destination: any BackupDestination, label: String, file: StaticString = #filePath, line: UInt = #line
    ) async throws {
        restores += 1
        let parent = work + "/restore-\(restores)"
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        let target = parent + "/Stores"
        let result = try await StoreHelper(storesDirectory: target, destination: destination).restore(backupName)
        XCTAssertEqual(result.backupName, backupName, file: file, line: line)
        XCTAssertEqual(try StoreFixture.describe(target), reference, "[\(label)] the restored tree", file: file, line: line)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: parent).filter { $0 != ".Stores.storebackup-lock" }, ["Stores"],
            "[\(label)] nothing left beside the store", file: file, line: line)
    }

    /// Puts the backup made in `local` on the backend, in its folder "streaming".
    private func upload(to backend: ContractBackend) async throws {
        let copy = work + "/upload.zip"
        try FileManager.default.copyItem(atPath: local + "/" + backupName, toPath: copy)
        try await backend.make("streaming", nil, Self.retry).upload(file: copy, as: backupName, progress: nil)
        try? FileManager.default.removeItem(atPath: copy)
    }
}
