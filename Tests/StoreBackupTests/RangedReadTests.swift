import CZip
import Foundation
import XCTest

@testable import StoreBackup

/// Issue 36 point 2: `ls` and `extract` of a remote backup read its end records, central
/// directory and manifest, then only the entries asked for, with ranged requests; on S3
/// (rclone and moto), WebDAV, SFTP and the Dropbox emulator, counting the bytes the server
/// side sent (the fault proxy's log, the emulator's log). Through faults (a lost answer, a
/// connection reset in the middle of a range, a server that answers ranges with 200, one
/// that ignores them) the results stay those of the same backup read from a local folder.
final class RangedReadTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var local: String { work + "/" + localFolder }
    var localFolder = "local"
    /// For the encrypted backup.
    var passwords: PasswordProvider?
    var backupName = ""
    /// The archive's layout, read from the local copy.
    var archiveSize: Int64 = 0
    var directoryBytes: Int64 = 0
    var spans: [String: Int64] = [:]
    var offsets: [String: Int64] = [:]
    /// A small blob and the large one.
    var smallBlob = ""
    let bigBlob = ".App_SUPPORT/_EXTERNAL_DATA/big-blob"
    /// As large again, so that the large blob is half the backup, not most of it.
    let otherBlob = ".App_SUPPORT/_EXTERNAL_DATA/other-blob"

    /// Quick retries, so the faults below heal within the test.
    static let retry = RetryPolicy(budget: 60, initialDelay: 0.02, maximumDelay: 0.1)

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("ranged")
        try StoreFixture.make(at: store, logRows: 200, blobCount: 4)
        // Incompressible and larger than the most a server may send whole for a range.
        var generator = SplitMix64(seed: 36)
        for blob in [bigBlob, otherBlob] {
            var big = Data(capacity: 10 << 20)
            for _ in 0..<((10 << 20) / 8) { withUnsafeBytes(of: generator.next()) { big.append(contentsOf: $0) } }
            try big.write(to: URL(fileURLWithPath: store + "/" + blob))
        }
        let created = try runStoreBackup(["create", store, "--to", local], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try readLayout(local + "/" + backupName)
        smallBlob = try XCTUnwrap(
            try FileManager.default.contentsOfDirectory(atPath: store + "/.App_SUPPORT/_EXTERNAL_DATA").sorted()
                .first { $0 != "big-blob" && $0 != "other-blob" }
                .map { ".App_SUPPORT/_EXTERNAL_DATA/" + $0 })
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    // MARK: destinations

    func testS3() async throws {
        let servers = try TestServers(label: "ranged-s3")
        defer { servers.stop() }
        try await checkHTTP(ContractBackend.s3(try servers.start("s3"), work: work), servers: servers)
    }

    func testS3Moto() async throws {
        let servers = try TestServers(label: "ranged-moto")
        defer { servers.stop() }
        try await checkHTTP(ContractBackend.s3(try servers.start("moto"), work: work), servers: servers)
    }

    func testWebDAV() async throws {
        let servers = try TestServers(label: "ranged-webdav")
        defer { servers.stop() }
        try await checkHTTP(ContractBackend.webDAV(try servers.start("webdav"), work: work), servers: servers)
    }

    func testSFTP() async throws {
        let servers = try TestServers(label: "ranged-sftp")
        defer { servers.stop() }
        let backend = try ContractBackend.sftp(try servers.start("sftp"), work: work)
        try await upload(to: backend)
        // In TCP mode each connection is one request (libcurl connects for each transfer);
        // SSH's own bytes (key exchange, authentication, framing) come on top of the data.
        func served(_ rules: [[String: Any]], _ operation: (any BackupDestination) async throws -> Void) async throws -> Int64 {
            let proxy = try ContractProxy(servers: servers, backend: backend, rules: rules, work: work)
            try await operation(try backend.make("ranged", proxy.port, Self.retry))
            let entries = proxy.entries()
            XCTAssertEqual(ContractProxy.faults(entries).count, rules.count, "[sftp] the fault struck: \(entries)")
            return Self.downBytes(entries)
        }
        let sshAllowance: Int64 = 256 << 10
        let plain = try await served([]) { try await self.assertListing($0) }
        XCTAssertLessThanOrEqual(plain, lsBound + sshAllowance, "[sftp] ls")
        let extracted = try await served([]) { try await self.assertExtract($0, [self.smallBlob]) }
        XCTAssertLessThanOrEqual(extracted, lsBound + spans[smallBlob]! + sshAllowance, "[sftp] extract")
        // A connection cut in the middle of the end records' read, and one cut at once.
        let reset = try await served([["requests": [2], "fault": "reset", "phase": "response", "after_bytes": 30000]]) {
            try await self.assertListing($0)
        }
        XCTAssertLessThanOrEqual(reset, lsBound + 30000 + sshAllowance, "[sftp] reset")
        _ = try await served([["requests": [3], "fault": "reset", "phase": "response", "after_bytes": 0]]) {
            try await self.assertExtract($0, [self.smallBlob, self.bigBlob])
        }
    }

    func testDropbox() async throws {
        let emulator = try DropboxEmulatorClient(label: "ranged-dropbox")
        defer { emulator.stop() }
        let backend = ContractBackend.dropboxBackend(emulator, work: work)
        try await upload(to: backend)
        let destination = try backend.make("ranged", nil, Self.retry)
        // The emulator's own log counts what each download answer carried.
        func served(faults: [String: Any], _ operation: () async throws -> Void) async throws -> (bytes: Int64, faults: Int) {
            try emulator.control("faults", faults)
            defer { _ = try? emulator.control("faults", [:]) }
            let before = try emulator.log().count
            try await operation()
            let downloads = try emulator.log().dropFirst(before).filter { $0["route"] as? String == "/2/files/download" }
            return (
                downloads.reduce(0) { $0 + ((($1["bytes_out"] as? NSNumber)?.int64Value) ?? 0) },
                downloads.filter { $0["fault"] is String }.count
            )
        }
        let plain = try await served(faults: [:]) { try await self.assertListing(destination) }
        XCTAssertLessThanOrEqual(plain.bytes, lsBound, "[dropbox] ls")
        let extracted = try await served(faults: [:]) { try await self.assertExtract(destination, [self.smallBlob]) }
        XCTAssertLessThanOrEqual(extracted.bytes, lsBound + spans[smallBlob]!, "[dropbox] extract")
        let only = ["routes": ["/2/files/download"], "count": 1] as [String: Any]
        for kind in ["drop", "truncate"] {
            let faulty = try await served(faults: only.merging(["kinds": [kind]]) { $1 }) {
                try await self.assertListing(destination)
                try await self.assertExtract(destination, [self.smallBlob])
            }
            XCTAssertEqual(faulty.faults, 1, "[dropbox] \(kind)")
            XCTAssertLessThanOrEqual(faulty.bytes, 2 * lsBound + spans[smallBlob]! + archiveSize / 100, "[dropbox] \(kind)")
        }
        // A server that answers every download with the whole file: read as a download.
        let whole = try await served(faults: ["routes": ["/2/files/download"], "kinds": ["ignore_range"]]) {
            try await self.assertListing(destination)
        }
        XCTAssertGreaterThan(whole.faults, 0, "[dropbox] ignored ranges")
        XCTAssertGreaterThanOrEqual(whole.bytes, archiveSize, "[dropbox] ignored ranges: downloaded")
    }

    /// An encrypted backup: the password is checked on the manifest's verifier, read in
    /// ranges like the rest; no password, or a wrong one, is refused as for a local backup.
    func testEncryptedBackupOnWebDAV() async throws {
        let servers = try TestServers(label: "ranged-encrypted")
        defer { servers.stop() }
        let passwordFile = work + "/password"
        FileManager.default.createFile(
            atPath: passwordFile, contents: Data("correct horse battery\n".utf8), attributes: [.posixPermissions: 0o600])
        passwords = .file(passwordFile)
        localFolder = "encrypted"
        let created = try runStoreBackup(
            ["create", store, "--to", local, "--encrypt", "--password-file", passwordFile], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try readLayout(local + "/" + backupName)
        let backend = ContractBackend.webDAV(try servers.start("webdav"), work: work)
        try await upload(to: backend)
        let proxy = try ContractProxy(servers: servers, backend: backend, rules: [], work: work)
        let destination = try backend.make("ranged", proxy.port, Self.retry)
        try await assertListing(destination)
        try await assertExtract(destination, [smallBlob])
        let zipEntries = proxy.entries().filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
        XCTAssertLessThanOrEqual(Self.downBytes(zipEntries), 2 * lsBound + spans[smallBlob]!)

        let wrong = work + "/wrong"
        FileManager.default.createFile(atPath: wrong, contents: Data("guess\n".utf8), attributes: [.posixPermissions: 0o600])
        let cases: [(PasswordProvider?, StoreBackupError)] = [
            (nil, StoreBackupError.passwordRequired(name: backupName)),
            (PasswordProvider.file(wrong), .wrongPassword(name: backupName)),
        ]
        for (provider, expected) in cases {
            do {
                _ = try await BackupBrowser(destination: destination, passwords: provider).listContents(backupName)
                XCTFail("listed without the right password")
            } catch let error as StoreBackupError {
                XCTAssertEqual(error, expected)
            }
        }
    }

    /// Extract reads every link of the backup (to check where each leads), and a folder
    /// asked for may hold many small files: each would cost a request of its own; they are
    /// fetched together in a few.
    func testManySmallEntriesCostFewRequests() async throws {
        let servers = try TestServers(label: "ranged-links")
        defer { servers.stop() }
        try FileManager.default.createDirectory(atPath: store + "/links", withIntermediateDirectories: true)
        for index in 0..<2000 { XCTAssertEqual(symlink("../notes.txt", store + "/links/\(index)"), 0) }
        try FileManager.default.createDirectory(atPath: store + "/small", withIntermediateDirectories: true)
        for index in 0..<500 {
            try Data("small file \(index)\n".utf8).write(to: URL(fileURLWithPath: store + "/small/\(index).txt"))
        }
        localFolder = "links"
        let created = try runStoreBackup(["create", store, "--to", local], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try readLayout(local + "/" + backupName)
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        try await upload(to: backend)
        let proxy = try ContractProxy(servers: servers, backend: backend, rules: [], work: work)
        let destination = try backend.make("ranged", proxy.port, Self.retry)
        try await assertExtract(destination, [smallBlob])
        let out = work + "/small-out"
        let result = try await BackupBrowser(destination: destination).extract(backupName, paths: ["small"], into: out)
        XCTAssertEqual(result.byteCount, (0..<500).reduce(0) { $0 + Int64("small file \($1)\n".utf8.count) })
        XCTAssertEqual(try String(contentsOfFile: out + "/small/499.txt", encoding: .utf8), "small file 499\n")
        let reads = proxy.entries().filter {
            ($0["request"] as? String)?.hasPrefix("GET") == true && ($0["request"] as? String)?.contains("Stores.zip") == true
        }
        XCTAssertLessThanOrEqual(reads.count, 16, "\(reads.count) requests for two extracts")
    }

    /// Each answer to a range is checked before its bytes are used: 206 or 200 with the
    /// matching Content-Range and length, or 200 with the whole object (then cut).
    func testAnswersToARangeAreChecked() throws {
        let object = Data((0..<100).map { UInt8($0) })
        func answer(_ status: Int, _ range: String?, _ body: Data) -> TransferResponse {
            TransferResponse(
                status: status, headers: range.map { ["content-range": $0] } ?? [:], body: body, bytesReceived: Int64(body.count))
        }
        func bytes(_ response: TransferResponse) throws -> Data {
            try RangedRead.bytes(of: response, range: 10..<20, size: 100, label: "test")
        }
        XCTAssertEqual(try bytes(answer(206, "bytes 10-19/100", object[10..<20])), object[10..<20])
        XCTAssertEqual(try bytes(answer(200, "bytes 10-19/100", object[10..<20])), object[10..<20], "rclone's 200")
        XCTAssertEqual(try bytes(answer(200, nil, object)), object[10..<20], "the whole object, cut")
        XCTAssertEqual(try bytes(answer(0, nil, object[10..<20])), object[10..<20], "sftp")
        for wrong in [
            answer(206, "bytes 11-20/100", object[11..<21]), answer(206, "bytes 10-19/99", object[10..<20]),
            answer(206, "bytes 10-19/100", object[10..<19]), answer(206, nil, object[10..<20]),
            answer(200, nil, object[0..<50]), answer(0, nil, object[10..<15]),
            answer(200, nil, object + object),
        ] {
            // Asking again would get the same: the backup is downloaded instead.
            XCTAssertThrowsError(try bytes(wrong), "\(wrong.status) \(wrong.headers)") { error in
                guard case StoreBackupError.transfer(let failure) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(failure.serviceCode, BackupRangeReader.rangesNotHonoured, failure.message)
                XCTAssertFalse(failure.isRetryable, failure.message)
            }
        }
    }

    /// An answer written in place (a restore's parallel ranges) is checked as one kept in
    /// memory, on the count of bytes written; a whole object stands in only for a range
    /// that is the whole object.
    func testAnswersWrittenInPlaceAreChecked() throws {
        func answer(_ status: Int, _ range: String?, written: Int64) -> TransferResponse {
            TransferResponse(
                status: status, headers: range.map { ["content-range": $0] } ?? [:], body: Data(), bytesReceived: written,
                bytesWritten: written)
        }
        func check(_ response: TransferResponse, _ range: Range<Int64> = 10..<20) throws {
            _ = try RangedRead.bytes(of: response, range: range, size: 100, label: "test", target: .file(descriptor: -1))
        }
        XCTAssertNoThrow(try check(answer(206, "bytes 10-19/100", written: 10)))
        XCTAssertNoThrow(try check(answer(200, "bytes 10-19/100", written: 10)), "rclone's 200")
        XCTAssertNoThrow(try check(answer(0, nil, written: 10)), "sftp")
        XCTAssertNoThrow(try check(answer(200, nil, written: 100), 0..<100), "the whole object for the whole object")
        for wrong in [
            answer(206, "bytes 11-20/100", written: 10), answer(206, "bytes 10-19/99", written: 10),
            answer(206, "bytes 10-19/100", written: 9), answer(206, nil, written: 10),
            answer(200, nil, written: 10), answer(0, nil, written: 5),
        ] {
            XCTAssertThrowsError(try check(wrong), "\(wrong.status) \(wrong.headers)") { error in
                guard case StoreBackupError.transfer(let failure) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(failure.serviceCode, BackupRangeReader.rangesNotHonoured, failure.message)
            }
        }
    }

    /// The sink that writes an answer in place puts its bytes at the range's offset and
    /// never past the range: an answer longer than asked for (the whole file) stops at the
    /// limit. Real libcurl transfers of a local file (`file://` honours a range as a server does).
    func testAnswerInPlaceNeverWritesPastItsRange() throws {
        let work = try TestEnvironment.temporaryDirectory("inplace")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let object = Data((0..<100).map { UInt8($0) })
        let source = work + "/object", staging = work + "/staging"
        FileManager.default.createFile(atPath: source, contents: object)
        FileManager.default.createFile(atPath: staging, contents: Data(repeating: 0xEE, count: 100))
        let descriptor = open(staging, O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(descriptor, 0)
        defer { close(descriptor) }
        let transfer = CurlTransfer(options: TransportOptions())
        var ranged = try RangedRead.request(
            TransferRequest(method: "GET", url: "file://" + source, label: "object"), range: 10..<20, size: 100,
            into: .file(descriptor: descriptor))
        let response = try transfer.perform(ranged, cancel: nil)
        XCTAssertEqual(response.bytesWritten, 10)
        XCTAssertTrue(response.body.isEmpty)
        ranged.byteRange = nil  // the whole file, as a server that ignores ranges sends it
        XCTAssertThrowsError(try transfer.perform(ranged, cancel: nil)) { error in
            guard case StoreBackupError.transfer(let failure) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(failure.serviceCode, RangedRead.answerTooLarge, failure.message)
        }
        let staged = try Data(contentsOf: URL(fileURLWithPath: staging))
        XCTAssertEqual(staged[0..<10], Data(repeating: 0xEE, count: 10), "nothing before the range")
        XCTAssertEqual(staged[20..<100], Data(repeating: 0xEE, count: 80), "nothing past the range")
    }

    /// A small backup (at most 8 MiB) from a server that ignores ranges is read from the
    /// whole answers it sends, each cut to the range asked for.
    func testSmallBackupFromAServerThatIgnoresRanges() async throws {
        let servers = try TestServers(label: "ranged-small")
        defer { servers.stop() }
        try FileManager.default.removeItem(atPath: store + "/" + bigBlob)
        try FileManager.default.removeItem(atPath: store + "/" + otherBlob)
        localFolder = "small"
        let created = try runStoreBackup(["create", store, "--to", local], environment: ["HOME": work])
        XCTAssertEqual(created.status, 0, created.stderr)
        backupName = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try readLayout(local + "/" + backupName)
        XCTAssertLessThan(archiveSize, RangedRead.maxWholeObjectBytes)
        let backend = ContractBackend.webDAV(try servers.start("webdav"), work: work)
        try await upload(to: backend)
        let proxy = try ContractProxy(
            servers: servers, backend: backend, rules: [["method": "GET", "path_contains": "Stores.zip", "fault": "norange"]], work: work)
        let destination = try backend.make("ranged", proxy.port, Self.retry)
        let remote = try await BackupBrowser(destination: destination).listContents(backupName)
        let reference = try await BackupBrowser(destination: LocalFolderDestination(folder: local)).listContents(backupName)
        XCTAssertEqual(remote, reference)
        // Ranged requests all (the Range header was removed), none a download.
        let reads = proxy.entries().filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
        XCTAssertFalse(reads.isEmpty)
        XCTAssertTrue(reads.allSatisfy { $0["status"] as? Int == 200 && $0["fault"] as? String == "norange (Range removed)" }, "\(reads)")
        try await assertExtract(destination, [smallBlob])
    }

    /// `verify --metadata-only` reads the central directory and the manifest in ranges and
    /// checks that they agree; a central directory that disagrees with the manifest fails.
    func testVerifyMetadataOnly() async throws {
        let servers = try TestServers(label: "ranged-verify")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let environment = backend.environment.merging(["HOME": work]) { $1 }
        let original = try Data(contentsOf: URL(fileURLWithPath: local + "/" + backupName))
        // The central directory's size of the small blob, one byte more than the manifest's.
        var disagreeing = original
        let name = Data(smallBlob.utf8)
        let directoryStart = Int(archiveSize - directoryBytes)
        let nameAt = try XCTUnwrap(disagreeing.range(of: name, in: directoryStart..<disagreeing.count)).lowerBound
        let header = nameAt - 46
        XCTAssertEqual(Array(disagreeing[header..<header + 4]), [0x50, 0x4B, 0x01, 0x02])
        disagreeing[header + 24] &+= 1
        for (folder, archive) in [("ranged", original), ("disagreeing", disagreeing)] {
            let copy = work + "/upload.zip"
            try archive.write(to: URL(fileURLWithPath: copy))
            try await backend.make(folder, nil, Self.retry).upload(file: copy, as: backupName, progress: nil)
        }

        let proxy = try ContractProxy(servers: servers, backend: backend, rules: [], work: work)
        let good = try runStoreBackup(
            ["verify", "latest", "--metadata-only", "--json"] + backend.arguments("ranged", "--from", proxy.port), environment: environment)
        XCTAssertEqual(good.status, 0, good.stderr)
        let result = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(good.stdout.utf8)) as? [[String: Any]])?.first)
        XCTAssertEqual(result["ok"] as? Bool, true, "\(result)")
        XCTAssertTrue((result["warning"] as? String)?.hasPrefix("metadata only") == true, "\(result)")
        let reads = proxy.entries().filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
        XCTAssertLessThanOrEqual(Self.downBytes(reads), lsBound + 4096, "central directory, manifest and the one link")

        let bad = try runStoreBackup(
            ["verify", "latest", "--metadata-only"] + backend.arguments("disagreeing", "--from", nil), environment: environment)
        XCTAssertEqual(bad.status, 1, bad.stdout + bad.stderr)
        XCTAssertTrue(bad.stdout.hasPrefix("FAILED") && bad.stdout.contains(smallBlob), bad.stdout)
    }

    /// The consistency check libzip makes of every local header when it opens a file
    /// (`ZIP_CHECKCONS`) is made of each entry a remote read takes: a local header naming
    /// another file, or claiming extra fields that run its data into the next entry, is
    /// refused before anything is written.
    func testInconsistentLocalHeadersAreRefused() async throws {
        let servers = try TestServers(label: "ranged-hostile")
        defer { servers.stop() }
        let backend = ContractBackend.s3(try servers.start("s3"), work: work)
        let original = try Data(contentsOf: URL(fileURLWithPath: local + "/" + backupName))
        let header = Int(try XCTUnwrap(offsets[smallBlob]))
        var renamed = original
        renamed[header + 30 + smallBlob.utf8.count - 1] ^= 0x01
        var overlapping = original
        overlapping[header + 28] = 0xFF
        overlapping[header + 29] = 0xFF
        for (label, damaged, reason) in [
            ("renamed", renamed, "names another file than the central directory"),
            ("overlapping", overlapping, "two entries share the same bytes"),
        ] {
            try damaged.write(to: URL(fileURLWithPath: local + "/" + backupName))
            let folder = "hostile-" + label
            let copy = work + "/upload.zip"
            try damaged.write(to: URL(fileURLWithPath: copy))
            let destination = try backend.make(folder, nil, Self.retry)
            try await destination.upload(file: copy, as: backupName, progress: nil)
            let out = work + "/out-" + label
            do {
                _ = try await BackupBrowser(destination: destination).extract(backupName, paths: [smallBlob], into: out)
                XCTFail("[\(label)] extracted")
            } catch StoreBackupError.corruptArchive(_, let message) {
                XCTAssertTrue(message.contains(reason), "[\(label)] \(message)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), label)
            // The same archive as a local file: libzip refuses it when it opens it.
            do {
                _ = try await BackupBrowser(destination: LocalFolderDestination(folder: local)).extract(
                    backupName, paths: [smallBlob], into: out)
                XCTFail("[\(label)] extracted from the local copy")
            } catch StoreBackupError.corruptArchive {}
        }
    }

    // MARK: the scenarios over HTTP

    /// S3 and WebDAV through the HTTP fault proxy, which logs each answer's body bytes.
    private func checkHTTP(_ backend: ContractBackend, servers: TestServers) async throws {
        try await upload(to: backend)
        func served(_ rules: [[String: Any]], _ operation: (any BackupDestination) async throws -> Void) async throws -> (
            bytes: Int64, faults: [String], requests: Int
        ) {
            let proxy = try ContractProxy(servers: servers, backend: backend, rules: rules, work: work)
            try await operation(try backend.make("ranged", proxy.port, Self.retry))
            let entries = proxy.entries().filter { ($0["request"] as? String)?.contains("Stores.zip") == true }
            return (Self.downBytes(entries), ContractProxy.faults(entries), entries.count)
        }
        let label = backend.label
        let plain = try await served([]) { try await self.assertListing($0) }
        XCTAssertLessThanOrEqual(plain.bytes, lsBound, "[\(label)] ls")
        let small = try await served([]) { try await self.assertExtract($0, [self.smallBlob]) }
        XCTAssertLessThanOrEqual(small.bytes, lsBound + spans[smallBlob]!, "[\(label)] extract of a small file")
        let big = try await served([]) { try await self.assertExtract($0, [self.bigBlob]) }
        XCTAssertLessThanOrEqual(big.bytes, lsBound + spans[bigBlob]!, "[\(label)] extract of the large blob")
        // 10 MiB read from start to end: chunks of 1, 2, 4 and 8 MiB, not ten of 1 MiB.
        XCTAssertLessThanOrEqual(big.requests, 6, "[\(label)] extract of the large blob \(big)")

        // Most of the backup asked for: ranged reads would cost more than a download (each
        // request counted as 256 KiB), so the backup is downloaded once it is clear.
        let most = try await served([]) { try await self.assertExtract($0, [self.bigBlob, self.otherBlob, self.smallBlob]) }
        XCTAssertGreaterThanOrEqual(most.bytes, archiveSize, "[\(label)] most of the backup: downloaded")
        XCTAssertLessThanOrEqual(most.bytes, archiveSize + lsBound, "[\(label)] most of the backup: downloaded, nothing else")

        let zipGET: [String: Any] = ["method": "GET", "path_contains": "Stores.zip"]
        // The answer to the first read (the end of the archive) is lost after the server sent it.
        let lost = try await served([zipGET.merging(["requests": [1], "fault": "reset", "phase": "before_response"]) { $1 }]) {
            try await self.assertListing($0)
        }
        XCTAssertEqual(lost.faults.count, 1, "[\(label)] lost answer")
        XCTAssertLessThanOrEqual(lost.bytes, lsBound, "[\(label)] lost answer")
        // The connection breaks in the middle of the end records, then of the large blob.
        let cut = try await served([
            zipGET.merging(["requests": [1, 5], "fault": "reset", "phase": "response", "after_bytes": 4096]) { $1 }
        ]) {
            try await self.assertListing($0)
            try await self.assertExtract($0, [self.bigBlob])
        }
        XCTAssertEqual(cut.faults.count, 2, "[\(label)] resets")
        XCTAssertLessThanOrEqual(cut.bytes, 2 * lsBound + spans[bigBlob]! + 2 * 4096, "[\(label)] resets")
        // rclone's way: 200 with the Content-Range and only the range.
        let range200 = try await served([zipGET.merging(["fault": "range200"]) { $1 }]) {
            try await self.assertListing($0)
            try await self.assertExtract($0, [self.smallBlob])
        }
        XCTAssertFalse(range200.faults.isEmpty, "[\(label)] 200 for a range")
        XCTAssertLessThanOrEqual(range200.bytes, 2 * lsBound + spans[smallBlob]!, "[\(label)] 200 for a range")
        // A server (or a cache in front of it) that drops the Range header: the whole backup
        // comes back, too large to take in place of a range, so it is downloaded instead.
        let ignored = try await served([zipGET.merging(["fault": "norange"]) { $1 }]) {
            try await self.assertListing($0)
            try await self.assertExtract($0, [self.smallBlob])
        }
        XCTAssertFalse(ignored.faults.isEmpty, "[\(label)] ignored ranges")
        XCTAssertGreaterThanOrEqual(ignored.bytes, 2 * archiveSize, "[\(label)] ignored ranges: downloaded")
    }

    // MARK: checks

    /// What `ls` may transfer: the central directory with the end records, the manifest,
    /// and the end of the archive where the end record is looked for (64 KiB and 42 bytes).
    private var lsBound: Int64 { directoryBytes + spans[Manifest.archivePath]! + RangedArchive.tailBytes }

    /// `ls` through `destination` equals `ls` of the local copy.
    private func assertListing(_ destination: any BackupDestination, file: StaticString = #filePath, line: UInt = #line) async throws {
        let remote = try await BackupBrowser(destination: destination, passwords: passwords).listContents(backupName)
        let reference = try await BackupBrowser(destination: LocalFolderDestination(folder: local), passwords: passwords)
            .listContents(backupName)
        XCTAssertEqual(remote, reference, file: file, line: line)
        XCTAssertTrue(remote.hasManifest && remote.entries.contains { $0.path == bigBlob }, file: file, line: line)
    }

    /// `extract` of `paths` through `destination` writes the store's bytes.
    private func assertExtract(
        _ destination: any BackupDestination, _ paths: [String], file: StaticString = #filePath, line: UInt = #line
    ) async throws {
        let out = work + "/out-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: out) }
        let result = try await BackupBrowser(destination: destination, passwords: passwords).extract(backupName, paths: paths, into: out)
        let sizes = try paths.map { Int64(try FileSystem.lstatInfo(store + "/" + $0).st_size) }
        XCTAssertEqual(result.byteCount, sizes.reduce(0, +), file: file, line: line)
        for path in paths {
            XCTAssertEqual(
                try Data(contentsOf: URL(fileURLWithPath: out + "/" + path)),
                try Data(contentsOf: URL(fileURLWithPath: store + "/" + path)),
                path, file: file, line: line)
        }
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix(".storebackup-tmp-") }, [],
            "no temporary left", file: file, line: line)
    }

    // MARK: helpers

    /// Puts the backup made in `local` on the backend, in its folder "ranged".
    private func upload(to backend: ContractBackend) async throws {
        let copy = work + "/upload.zip"
        try FileManager.default.copyItem(atPath: local + "/" + backupName, toPath: copy)
        try await backend.make("ranged", nil, Self.retry).upload(file: copy, as: backupName, progress: nil)
        try? FileManager.default.removeItem(atPath: copy)
    }

    /// The central directory's size (with the end records) and each entry's span (its local
    /// header and data, up to the next entry), from the local copy.
    private func readLayout(_ path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        defer { close(descriptor) }
        var info = stat()
        XCTAssertEqual(fstat(descriptor, &info), 0)
        archiveSize = Int64(info.st_size)
        let layout = try CentralDirectoryCheck(path: path, backupName: backupName).run(
            FileArchiveBytes(descriptor: descriptor, size: archiveSize))
        directoryBytes = archiveSize - layout.directoryOffset
        var code: Int32 = 0
        let archive = try XCTUnwrap(zip_open(path, ZIP_RDONLY, &code))
        defer { zip_discard(archive) }
        let starts = (layout.offsets + [layout.directoryOffset]).sorted()
        for (index, offset) in layout.offsets.enumerated() {
            let entry = String(cString: zip_get_name(archive, UInt64(index), 0))
            let name = entry.hasSuffix("/") ? String(entry.dropLast()) : entry
            spans[name] = starts.first { $0 > offset }! - offset
            offsets[name] = offset
        }
    }

    /// Body bytes (HTTP) or bytes (TCP) the proxy sent to the client, over its log entries.
    static func downBytes(_ entries: [[String: Any]]) -> Int64 {
        entries.reduce(0) { $0 + (($1["down_bytes"] as? NSNumber)?.int64Value ?? 0) }
    }
}
