import Foundation
import XCTest
@testable import StoreBackup

/// The WebDAV destination against a real Apache mod_dav server with basic auth on loopback.
final class WebDAVDestinationTests: XCTestCase {
    var servers: TestServers!
    var server: [String: Any] = [:]
    var work = ""

    /// Quick retries: the tests' failures are meant to be final, not to heal.
    static let retry = RetryPolicy(requestAttempts: 2, operationAttempts: 1, initialDelay: 0.02, maximumDelay: 0.1)

    var user: String { server["user"] as! String }
    var password: String { server["password"] as! String }
    var dataDirectory: String { server["data_dir"] as! String }
    var port: Int { server["port"] as! Int }

    /// webdav://127.0.0.1:PORT/dav/<folder>
    func url(_ folder: String) -> String { "webdav://127.0.0.1:\(port)/dav/" + folder }

    override func setUpWithError() throws {
        servers = try TestServers(label: "webdav")
        server = try servers.start("webdav")
        work = try TestEnvironment.temporaryDirectory("webdav")
    }

    override func tearDownWithError() throws {
        servers.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    /// Credentials only through the options' own environment; HOME points at an empty
    /// folder so no real credentials file is read.
    func options(user: String? = nil, password: String? = nil, retry: RetryPolicy = WebDAVDestinationTests.retry) -> DestinationOptions {
        var environment = ["HOME": work]
        environment["STOREBACKUP_WEBDAV_USER"] = user ?? self.user
        environment["STOREBACKUP_WEBDAV_PASSWORD"] = password ?? self.password
        return DestinationOptions(retry: retry, environment: environment)
    }

    func destination(_ folder: String = "backups", options: DestinationOptions? = nil) throws -> WebDAVDestination {
        try WebDAVDestination.make(url: url(folder), options: options ?? self.options())
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        let path = work + "/" + name
        let random = FileHandle(forReadingAtPath: "/dev/urandom")!
        defer { try? random.close() }
        try random.readData(ofLength: bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    func leftovers(in folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dataDirectory + "/" + folder)) ?? [])
            .filter { $0.hasPrefix(".storebackup-tmp-") }
    }

    // MARK: round trip

    func testCreateListRestoreDeleteRoundTrip() async throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store)
        // A folder two levels deep that does not exist yet, with a space in its name.
        let destination = try destination("team backups/nightly")
        XCTAssertEqual(destination.displayName, "webdav://127.0.0.1:\(port)/dav/team backups/nightly")
        let helper = StoreHelper(storesDirectory: store, destination: destination)

        let phases = PhaseRecorder()
        let created = try await helper.createBackup { phases.record($0) }
        XCTAssertTrue(phases.uploadedBytes(total: created.size), "upload progress reaches the archive size")
        XCTAssertTrue(FileManager.default.fileExists(atPath: dataDirectory + "/team backups/nightly/" + created.name))
        XCTAssertEqual(leftovers(in: "team backups/nightly"), [])

        let listed = try await helper.listBackups()
        XCTAssertEqual(listed.map(\.name), [created.name])
        XCTAssertEqual(listed.first?.size, created.size)
        XCTAssertNotNil(listed.first?.modified)

        let restoredStore = work + "/Restored/Stores"
        let restoreHelper = StoreHelper(storesDirectory: restoredStore, destination: destination)
        let restored = try await restoreHelper.restore("latest") { phases.record($0) }
        XCTAssertEqual(restored.backupName, created.name)
        XCTAssertTrue(phases.sawDownload)
        let original = try StoreFixture.describe(store, includeJournals: false)
        XCTAssertTrue(original.keys.contains(".secret-config") && original.keys.contains(".App_SUPPORT/_EXTERNAL_DATA"))
        XCTAssertEqual(try StoreFixture.describe(restoredStore, includeJournals: false), original)
        XCTAssertEqual(try StoreFixture.query(restoredStore + "/App.sqlite", "PRAGMA integrity_check"), "ok")

        try await helper.deleteBackup(created.name)
        let afterDelete = try await helper.listBackups()
        XCTAssertEqual(afterDelete.count, 0)
    }

    /// The same round trip through the command line and the URL resolver.
    func testRoundTripThroughTheCommandLine() throws {
        let store = work + "/Stores"
        try StoreFixture.make(at: store)
        let environment = ["HOME": work, "STOREBACKUP_WEBDAV_USER": user, "STOREBACKUP_WEBDAV_PASSWORD": password]
        let to = ["--to", url("cli")]
        let created = try runStoreBackup(["create", store] + to, environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertFalse(created.stderr.contains(password), "no password in output")

        let listed = try runStoreBackup(["list", "--json"] + to, environment: environment)
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as! [[String: Any]]
        XCTAssertEqual(rows.map { $0["name"] as! String }, [name])

        let restored = try runStoreBackup(["restore", name, work + "/Restored", "--yes", "--from", url("cli")], environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertEqual(try StoreFixture.describe(work + "/Restored", includeJournals: false),
                       try StoreFixture.describe(store, includeJournals: false))

        let deleted = try runStoreBackup(["delete", name, "--yes"] + to, environment: environment)
        XCTAssertEqual(deleted.status, 0, deleted.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dataDirectory + "/cli/" + name))
    }

    func testNamesWithBracketsAndSpacesAndOnlyBackupsAreListed() async throws {
        let destination = try destination()
        let file = try makeFile("a.zip", bytes: 10_000)
        let seedName = "[2026-Nov-21] 10.15 PM Stores.zip"
        try await destination.upload(file: file, as: seedName, progress: nil)
        // Things that are not backups: another file, a folder with a backup-like name, a temporary.
        try "x".write(toFile: dataDirectory + "/backups/notes.txt", atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: dataDirectory + "/backups/2026-01-01 000000 Stores.zip",
                                                withIntermediateDirectories: true)
        try "x".write(toFile: dataDirectory + "/backups/.storebackup-tmp-1-x.zip", atomically: false, encoding: .utf8)

        let listed = try await destination.listBackups()
        XCTAssertEqual(listed.map(\.name), [seedName])
        XCTAssertEqual(listed.first?.size, 10_000)

        let target = work + "/down.zip"
        try await destination.download(seedName, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), FileManager.default.contents(atPath: file))
    }

    func testMissingFolderListsEmpty() async throws {
        let listed = try await destination("no/such/folder").listBackups()
        XCTAssertEqual(listed.count, 0)
    }

    // MARK: refusals

    func testUploadingTheSameNameTwiceIsRefusedAndKeepsTheFirst() async throws {
        let destination = try destination()
        let name = "2026-05-01 120000 Stores.zip"
        let first = try makeFile("first.zip", bytes: 5_000)
        let second = try makeFile("second.zip", bytes: 7_000)
        try await destination.upload(file: first, as: name, progress: nil)
        do {
            try await destination.upload(file: second, as: name, progress: nil)
            XCTFail("a second upload under the same name must be refused")
        } catch let error as StoreBackupError {
            XCTAssertEqual(error, .backupExists(name: name, destination: destination.displayName))
        }
        XCTAssertEqual(FileManager.default.contents(atPath: dataDirectory + "/backups/" + name),
                       FileManager.default.contents(atPath: first))
        XCTAssertEqual(leftovers(in: "backups"), [], "the temporary of the refused upload is removed")
    }

    func testDeletingAnUnknownNameIsBackupNotFound() async throws {
        let destination = try destination()
        let name = "2020-01-01 000000 Stores.zip"
        do {
            try await destination.delete(name)
            XCTFail("deleting an unknown backup must fail")
        } catch let error as StoreBackupError {
            XCTAssertEqual(error, .backupNotFound(name: name, destination: destination.displayName))
        }
        do {
            try await destination.download(name, to: work + "/nothing.zip", progress: nil)
            XCTFail("downloading an unknown backup must fail")
        } catch let error as StoreBackupError {
            XCTAssertEqual(error, .backupNotFound(name: name, destination: destination.displayName))
        }
    }

    func testWrongPasswordIsAClearErrorWithoutThePassword() async throws {
        let wrong = "wrong-\(UUID().uuidString)"
        let destination = try destination(options: options(password: wrong))
        for operation in ["list", "upload"] {
            do {
                if operation == "list" {
                    _ = try await destination.listBackups()
                } else {
                    try await destination.upload(file: try makeFile("f.zip", bytes: 100), as: "2026-01-01 000000 Stores.zip", progress: nil)
                }
                XCTFail("\(operation) with a wrong password must fail")
            } catch {
                let message = "\(error)"
                XCTAssertTrue(message.contains("wrong user or password"), message)
                XCTAssertTrue(message.contains(destination.displayName), "names the destination: \(message)")
                XCTAssertFalse(message.contains(wrong), message)
                XCTAssertFalse(message.contains(password), message)
            }
        }
    }

    func testNoCredentialsAgainstAServerThatWantsThemSaysWhatToSet() async throws {
        let destination = try WebDAVDestination.make(url: url("backups"), options: DestinationOptions(retry: Self.retry, environment: ["HOME": work]))
        do {
            _ = try await destination.listBackups()
            XCTFail("must fail without credentials")
        } catch {
            XCTAssertTrue("\(error)".contains("STOREBACKUP_WEBDAV_PASSWORD"), "\(error)")
        }
    }

    func testCredentialsFileIsUsed() async throws {
        let file = work + "/credentials"
        try "STOREBACKUP_WEBDAV_USER=\(user)\nSTOREBACKUP_WEBDAV_PASSWORD=\(password)\n".write(toFile: file, atomically: false, encoding: .utf8)
        chmod(file, 0o600)
        let destination = try WebDAVDestination.make(
            url: url("backups"), options: DestinationOptions(retry: Self.retry, credentialsFile: file, environment: ["HOME": work]))
        let listed = try await destination.listBackups()
        XCTAssertEqual(listed.count, 0)
    }

    func testInvalidURLsAreRefused() throws {
        for bad in ["webdav://", "webdav:///path", "webdav://host:99999/x", "webdav://host/a?b=c", "http://host/x", "webdav://host/../x"] {
            XCTAssertThrowsError(try WebDAVDestination.make(url: bad, options: options()), bad) { error in
                guard case StoreBackupError.invalidDestination = error else { return XCTFail("\(bad): \(error)") }
            }
        }
        XCTAssertThrowsError(try WebDAVDestination.make(url: "webdav://bob:hunter2@host/x", options: options())) { error in
            XCTAssertFalse("\(error)".contains("hunter2"), "\(error)")
            XCTAssertTrue("\(error)".contains("STOREBACKUP_WEBDAV_PASSWORD"), "\(error)")
        }
        let https = try WebDAVDestination.make(url: "webdavs://[::1]:8443/a%20b/c", options: options())
        XCTAssertEqual(https.httpScheme, "https")
        XCTAssertEqual(https.folder, ["a b", "c"])
        XCTAssertEqual(https.displayName, "webdavs://[::1]:8443/a b/c")
    }

    func testConnectionRefusedIsAClearError() async throws {
        let closedPort = try Self.unusedPort()
        let destination = try WebDAVDestination.make(
            url: "webdav://127.0.0.1:\(closedPort)/dav/backups",
            options: options(retry: RetryPolicy(requestAttempts: 1, operationAttempts: 1)))
        do {
            _ = try await destination.listBackups()
            XCTFail("must fail")
        } catch {
            XCTAssertTrue("\(error)".contains("cannot reach 127.0.0.1:\(closedPort)"), "\(error)")
        }
    }

    /// A TLS server whose self-signed certificate nobody trusts.
    func testUntrustedCertificateIsAClearErrorWithTheCAFileHint() async throws {
        let certificate = work + "/cert.pem", key = work + "/key.pem"
        try run("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate,
                                     "-days", "1", "-subj", "/CN=127.0.0.1"])
        let tlsPort = try Self.unusedPort()
        let tls = Process()
        tls.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        tls.arguments = ["s_server", "-accept", "127.0.0.1:\(tlsPort)", "-cert", certificate, "-key", key, "-www", "-quiet"]
        tls.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        tls.standardError = FileHandle(forWritingAtPath: "/dev/null")
        tls.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        try tls.run()
        defer { kill(tls.processIdentifier, SIGKILL); tls.waitUntilExit() }
        let deadline = Date().addingTimeInterval(10)
        while !Self.accepts(port: tlsPort) && Date() < deadline { usleep(50_000) }

        let destination = try WebDAVDestination.make(
            url: "webdavs://127.0.0.1:\(tlsPort)/dav", options: options(retry: RetryPolicy(requestAttempts: 1, operationAttempts: 1)))
        do {
            _ = try await destination.listBackups()
            XCTFail("an untrusted certificate must be refused")
        } catch StoreBackupError.transfer(let failure) {
            XCTAssertEqual(failure.kind, .tls)
            XCTAssertEqual(failure.curlCode, 60, "CURLE_PEER_FAILED_VERIFICATION")
            XCTAssertTrue(failure.message.contains("certificate"), failure.message)
            XCTAssertEqual(failure.remedy, .trustCertificateAuthority)
            XCTAssertFalse(failure.message.contains("--"), "the library names no command-line flag: \(failure.message)")
        }
    }

    // MARK: resume

    /// Each upload is read back (SHA-256) before it is published, unless turned off.
    func testUploadsAreReadBackUnlessTurnedOff() async throws {
        let file = try makeFile("readback.zip", bytes: 100_000)
        try await destination().upload(file: file, as: "2026-02-03 000000 Stores.zip", progress: nil)
        var options = self.options()
        options.environment["STOREBACKUP_WEBDAV_READBACK"] = "off"
        try await destination(options: options).upload(file: file, as: "2026-02-04 000000 Stores.zip", progress: nil)
        let log = (try? String(contentsOfFile: server["access_log"] as! String, encoding: .utf8)) ?? ""
        let readBacks = log.split(separator: "\n").filter { $0.contains("\"GET ") && $0.contains(".storebackup-tmp-") }
        XCTAssertEqual(readBacks.count, 1, "one read-back, for the first upload only: \(log)")
        XCTAssertTrue(readBacks.first?.contains("\" 200 ") ?? false, log)
    }

    func testDownloadContinuesAPartialFileWithARangeRequest() async throws {
        let destination = try destination()
        let name = "2026-02-02 020202 Stores.zip"
        let file = try makeFile("big.zip", bytes: 3 << 20)
        try await destination.upload(file: file, as: name, progress: nil)
        let content = FileManager.default.contents(atPath: file)!

        let target = work + "/partial.zip"
        try content.prefix(1 << 20).write(to: URL(fileURLWithPath: target))
        try await destination.download(name, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), content)
        let log = (try? String(contentsOfFile: server["access_log"] as! String, encoding: .utf8)) ?? ""
        // The upload's read-back check is a GET of the temporary: only the backup's GETs count.
        let gets = log.split(separator: "\n").filter { $0.contains("\"GET ") && $0.contains("Stores.zip") }
        XCTAssertEqual(gets.count, 1)
        XCTAssertTrue(gets.first?.contains("\" 206 ") ?? false, "a partial content answer: \(gets)")

        // Already complete: the server answers 416 and the file stays as it is.
        try await destination.download(name, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), content)

        // A leftover longer than the backup cannot be part of it: downloaded again from the start.
        try (content + Data(count: 100)).write(to: URL(fileURLWithPath: target))
        try await destination.download(name, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), content)
    }

    // MARK: faults

    /// Through the fault proxy: a 503 on the listing, a connection reset in the middle of
    /// the upload's body and one in the middle of the download. The requests are retried
    /// (the download resumes with a Range request) and the backup arrives intact.
    func testFaultsAreRetriedAndTheDownloadResumes() async throws {
        let plan = work + "/plan.json"
        let rules: [[String: Any]] = [
            ["method": "PROPFIND", "requests": [1], "fault": "503", "retry_after": NSNull()],
            ["method": "PUT", "requests": [1], "fault": "reset", "phase": "request", "after_bytes": 262_144],
            ["method": "GET", "path_contains": "Stores.zip", "requests": [1], "fault": "reset", "phase": "response", "after_bytes": 1_048_576],
        ]
        try JSONSerialization.data(withJSONObject: ["seed": 1, "rules": rules]).write(to: URL(fileURLWithPath: plan))
        let proxy = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(port)", "--plan", plan])
        let proxyPort = proxy["port"] as! Int
        let retry = RetryPolicy(requestAttempts: 4, operationAttempts: 2, initialDelay: 0.02, maximumDelay: 0.1)
        let destination = RetryingDestination(
            try WebDAVDestination.make(url: "webdav://127.0.0.1:\(proxyPort)/dav/faults", options: options(retry: retry)), policy: retry)

        let name = "2026-03-03 030303 Stores.zip"
        let file = try makeFile("faults.zip", bytes: 3 << 20)
        try await destination.upload(file: file, as: name, progress: nil)
        let listed = try await destination.listBackups()
        XCTAssertEqual(listed.map(\.name), [name])
        XCTAssertEqual(listed.first?.size, 3 << 20)
        let target = work + "/faults-down.zip"
        try await destination.download(name, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), FileManager.default.contents(atPath: file))
        XCTAssertEqual(leftovers(in: "faults"), [])

        let proxyLog = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8)
        XCTAssertEqual(proxyLog.split(separator: "\n").filter { !$0.contains("\"fault\": null") && !$0.contains("\"fault\":null") }.count, 3,
                       "each planned fault fired once: \(proxyLog)")
        let accessLog = try String(contentsOfFile: server["access_log"] as! String, encoding: .utf8)
        XCTAssertTrue(accessLog.split(separator: "\n").contains { $0.contains("\"GET ") && $0.contains("\" 206 ") },
                      "the second GET asked for the rest only: \(accessLog)")
    }

    // MARK: helpers

    static func unusedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw XCTSkip("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    func run(_ executable: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw XCTSkip("\(executable) failed") }
    }
}

/// Collects progress reports from the worker threads.
final class PhaseRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var reports: [BackupProgress] = []

    func record(_ progress: BackupProgress) { lock.withLock { reports.append(progress) } }

    func uploadedBytes(total: Int64) -> Bool {
        lock.withLock { reports.contains { $0.phase == .uploading && $0.bytesDone == total && $0.bytesTotal == total } }
    }

    var sawDownload: Bool { lock.withLock { reports.contains { $0.phase == .downloading && $0.bytesDone > 0 } } }
}
