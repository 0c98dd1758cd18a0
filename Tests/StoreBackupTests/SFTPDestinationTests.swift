import Foundation
import XCTest

@testable import StoreBackup

/// The SFTP destination against a real OpenSSH server (key auth only) on loopback.
final class SFTPDestinationTests: XCTestCase, WorkFolderTest {
    var servers: TestServers!
    var server: [String: Any] = [:]
    var work = ""

    /// Quick retries: the tests' failures are meant to be final, not to heal.
    static let retry = RetryPolicy(requestAttempts: 2, operationAttempts: 1, initialDelay: 0.02, maximumDelay: 0.1)

    var port: Int { server["port"] as! Int }
    var user: String { server["user"] as! String }
    var key: String { server["key"] as! String }
    var knownHosts: String { server["known_hosts"] as! String }
    /// The server's data folder (an absolute path on the server, which is this machine).
    var dataDirectory: String { server["path"] as! String }

    func url(_ folder: String) -> String { "sftp://\(user)@127.0.0.1:\(port)\(dataDirectory)/\(folder)" }

    override func setUpWithError() throws {
        servers = try TestServers(label: "sftp")
        server = try servers.start("sftp")
        work = try TestEnvironment.temporaryDirectory("sftp")
    }

    override func tearDownWithError() throws {
        servers.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    /// HOME points at an empty folder: nothing of the real ~/.ssh is used.
    func options(key: String? = nil, knownHosts: String? = nil, retry: RetryPolicy = SFTPDestinationTests.retry) -> DestinationOptions {
        DestinationOptions(retry: retry, sshKey: key ?? self.key, knownHosts: knownHosts ?? self.knownHosts, environment: ["HOME": work])
    }

    func destination(_ folder: String = "backups", options: DestinationOptions? = nil) throws -> SFTPDestination {
        try SFTPDestination.make(url: url(folder), options: options ?? self.options())
    }

    func leftovers(in folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dataDirectory + "/" + folder)) ?? [])
            .filter { $0.hasPrefix(".storebackup-tmp-") }
    }

    // MARK: keys and listing

    func testDefaultKeyAndKnownHostsComeFromHome() async throws {
        try FileManager.default.createDirectory(atPath: work + "/.ssh", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: key, toPath: work + "/.ssh/id_ed25519")
        try FileManager.default.copyItem(atPath: knownHosts, toPath: work + "/.ssh/known_hosts")
        let destination = try SFTPDestination.make(
            url: url("backups"), options: DestinationOptions(retry: Self.retry, environment: ["HOME": work]))
        XCTAssertEqual(destination.privateKeyFile, work + "/.ssh/id_ed25519")
        XCTAssertNil(destination.publicKeyFile, "no .pub beside it: libssh2 derives the public key")
        XCTAssertEqual(destination.knownHostsFile, work + "/.ssh/known_hosts")
        let listed = try await destination.listBackups()
        XCTAssertEqual(listed.count, 0)
    }

    /// A link named like a backup is not one (the listing comes from `ls -l` on the server).
    func testALinkNamedLikeABackupIsNotListed() async throws {
        let destination = try destination()
        let name = "2026-01-01 000000 Stores.zip"
        try await destination.upload(file: try makeFile("a.zip", bytes: 10_000), as: name, progress: nil)
        try FileManager.default.createSymbolicLink(
            atPath: dataDirectory + "/backups/2026-01-02 000000 Stores.zip", withDestinationPath: name)
        let listed = try await destination.listBackups()
        XCTAssertEqual(listed.map(\.name), [name])
    }

    func testLongListingParsing() {
        let text = """
            drwxr-xr-x    2 root     root         4096 Nov 22 19:11 .
            -rw-r--r--    1 root     root      1234567 Nov 22 19:11 2026-11-22 031507 Stores.zip
            -rw-------    1 backup   users           7 Jan  3  2024  two  spaces  Stores.zip\r
            -rw-r--r--    1 root     root            6 Nov 22 19:05 notes.txt
            lrwxrwxrwx    1 root     root            5 Nov 22 19:11 2026-01-02 000000 Stores.zip -> x
            drwxr-xr-x    3 root     root         4096 Nov 22 19:05 2026-01-01 000000 Stores.zip
            -rw-r--r--    1 root     root            9 Nov 22 19:05 .storebackup-tmp-1-x.zip
            """
        let parsed = SFTPDestination.parseLongListing(text)
        XCTAssertEqual(parsed.unparsed, 0)
        XCTAssertEqual(
            parsed.entries,
            [
                .init(name: "2026-11-22 031507 Stores.zip", size: 1_234_567),
                .init(name: " two  spaces  Stores.zip", size: 7),
            ].filter { BackupName.isBackup($0.name) })
        XCTAssertEqual(SFTPDestination.parseLongListing("2026-11-22 031507 Stores.zip\n").unparsed, 1)
        XCTAssertEqual(SFTPDestination.quoted(#"/a "b" \c's"#), #""/a \"b\" \\c\'s""#)
    }

    // MARK: refusals

    /// The listing does not show a folder of that name, so the upload goes ahead and the
    /// server's rename is what refuses: the temporary must still be removed.
    func testARefusedRenameLeavesNoTemporary() async throws {
        let destination = try destination()
        let name = "2026-05-01 120000 Stores.zip"
        try FileManager.default.createDirectory(atPath: dataDirectory + "/backups/" + name, withIntermediateDirectories: true)
        do {
            try await destination.upload(file: try makeFile("first.zip", bytes: 5_000), as: name, progress: nil)
            XCTFail("the rename onto a folder must fail")
        } catch {
            XCTAssertTrue("\(error)".contains(destination.displayName), "\(error)")
        }
        XCTAssertEqual(leftovers(in: "backups"), [])
        XCTAssertTrue(FileSystem.isDirectory(dataDirectory + "/backups/" + name))
    }

    func testAKeyTheServerDoesNotKnowIsAClearError() async throws {
        let wrongKey = work + "/other_key"
        try runChecked("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", wrongKey])
        let destination = try destination(options: options(key: wrongKey))
        do {
            _ = try await destination.listBackups()
            XCTFail("a key the server does not know must be refused")
        } catch StoreBackupError.transfer(let error) {
            XCTAssertEqual(error.kind, .authentication)
            XCTAssertTrue(error.message.contains("the server refused the key \(wrongKey)"), error.message)
            XCTAssertTrue(error.message.contains(destination.displayName), error.message)
        }
    }

    func testAnUnknownHostKeyIsRefused() async throws {
        let empty = work + "/known_hosts_empty"
        FileManager.default.createFile(atPath: empty, contents: Data())
        let destination = try destination(options: options(knownHosts: empty))
        let before = try FileManager.default.contentsOfDirectory(atPath: dataDirectory)
        do {
            try await destination.upload(file: try makeFile("f.zip", bytes: 100), as: "2026-01-01 000000 Stores.zip", progress: nil)
            XCTFail("an unknown host must be refused")
        } catch StoreBackupError.transfer(let error) {
            XCTAssertEqual(error.kind, .hostKey)
            XCTAssertTrue(error.message.contains("is not in \(empty)"), error.message)
            XCTAssertTrue(error.message.contains("ssh-keyscan -p \(port) 127.0.0.1 >> \(empty)"), error.message)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dataDirectory), before, "nothing was written")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: empty)), Data(), "the key was not added silently")
    }

    func testAChangedHostKeyIsRefused() async throws {
        let otherHostKey = work + "/other_host_key"
        try runChecked("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", otherHostKey])
        let publicKey = try String(contentsOfFile: otherHostKey + ".pub", encoding: .utf8).split(separator: " ").prefix(2).joined(
            separator: " ")
        let mismatched = work + "/known_hosts_changed"
        try "[127.0.0.1]:\(port) \(publicKey)\n".write(toFile: mismatched, atomically: false, encoding: .utf8)
        let destination = try destination(options: options(knownHosts: mismatched))
        do {
            _ = try await destination.listBackups()
            XCTFail("a changed host key must be refused")
        } catch StoreBackupError.transfer(let error) {
            XCTAssertEqual(error.kind, .hostKey)
            XCTAssertTrue(error.message.contains("does not match"), error.message)
        }
    }

    func testAMissingKnownHostsFileIsAClearError() throws {
        let missing = work + "/no_known_hosts"
        XCTAssertThrowsError(try destination(options: options(knownHosts: missing))) { error in
            guard case StoreBackupError.invalidDestination(_, let reason, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("no known_hosts file at \(missing)"), reason)
            XCTAssertTrue(reason.contains("ssh-keyscan -p \(port) 127.0.0.1 >> \(missing)"), reason)
        }
        XCTAssertThrowsError(try destination(options: options(key: work + "/no_key"))) { error in
            XCTAssertTrue("\(error)".contains("the SSH key \(work)/no_key does not exist"), "\(error)")
        }
        XCTAssertThrowsError(try SFTPDestination.make(url: url("x"), options: DestinationOptions(environment: ["HOME": work]))) { error in
            XCTAssertTrue("\(error)".contains("no SSH key"), "\(error)")
        }
    }

    func testInvalidURLsAreRefused() throws {
        for bad in ["sftp://host", "sftp://", "sftp://u@host:0/x", "sftp://u:secret@host/x", "webdav://host/x", "sftp://u@host/a/../b"] {
            XCTAssertThrowsError(try SFTPDestination.make(url: bad, options: options()), bad) { error in
                guard case StoreBackupError.invalidDestination = error else { return XCTFail("\(bad): \(error)") }
                XCTAssertFalse("\(error)".contains("secret"), "\(error)")
            }
        }
        let root = try SFTPDestination.make(url: "sftp://alice@example.org/", options: options())
        XCTAssertEqual(root.folder, "/")
        XCTAssertEqual(root.port, 22)
        XCTAssertEqual(root.displayName, "sftp://alice@example.org/")
    }
}
