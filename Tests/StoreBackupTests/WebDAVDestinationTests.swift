import Foundation
import XCTest

@testable import StoreBackup

/// The WebDAV destination against a real Apache mod_dav server with basic auth on loopback.
final class WebDAVDestinationTests: XCTestCase, WorkFolderTest {
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

    // MARK: refusals

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
        let destination = try WebDAVDestination.make(
            url: url("backups"), options: DestinationOptions(retry: Self.retry, environment: ["HOME": work]))
        do {
            _ = try await destination.listBackups()
            XCTFail("must fail without credentials")
        } catch {
            XCTAssertTrue("\(error)".contains("STOREBACKUP_WEBDAV_PASSWORD"), "\(error)")
        }
    }

    func testCredentialsFileIsUsed() async throws {
        let file = work + "/credentials"
        try "STOREBACKUP_WEBDAV_USER=\(user)\nSTOREBACKUP_WEBDAV_PASSWORD=\(password)\n".write(
            toFile: file, atomically: false, encoding: .utf8)
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

    /// A TLS server whose self-signed certificate nobody trusts.
    func testUntrustedCertificateIsAClearErrorWithTheCAFileHint() async throws {
        let certificate = work + "/cert.pem", key = work + "/key.pem"
        try runChecked(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate,
                "-days", "1", "-subj", "/CN=127.0.0.1",
            ])
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

    /// Resuming is in the destination contract; what is WebDAV's own: a leftover that is
    /// already whole gets 416 and stays, one longer than the backup is fetched again.
    func testALeftoverThatIsWholeOrLongerIsNotResumed() async throws {
        let destination = try destination()
        let name = "2026-02-02 020202 Stores.zip"
        let file = try makeFile("big.zip", bytes: 1 << 20)
        try await destination.upload(file: file, as: name, progress: nil)
        let content = FileManager.default.contents(atPath: file)!
        let target = work + "/leftover.zip"
        try content.write(to: URL(fileURLWithPath: target))
        try await destination.download(name, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), content)
        let log = (try? String(contentsOfFile: server["access_log"] as! String, encoding: .utf8)) ?? ""
        XCTAssertTrue(
            log.split(separator: "\n").contains { $0.contains("\"GET ") && $0.contains("Stores.zip") && $0.contains("\" 416 ") }, log)

        try (content + Data(count: 100)).write(to: URL(fileURLWithPath: target))
        try await destination.download(name, to: target, progress: nil)
        XCTAssertEqual(FileManager.default.contents(atPath: target), content)
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
