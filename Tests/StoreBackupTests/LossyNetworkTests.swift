import CCurl
import Foundation
import XCTest

@testable import StoreBackup

/// Issue 14: every remote destination through a fault-injecting proxy in front of a real
/// server (rclone's and moto's S3, Apache mod_dav, OpenSSH; the Dropbox emulator for TLS).
/// Every run must end honestly: exit 0 with exactly that backup listed and verifying, or
/// exit 1 with nothing listed. The deterministic faults (a lost answer to the publishing
/// request, a flipped byte, a resumed download answered with 200 + Content-Range, a reset
/// in each phase of connection set-up) must heal: exit 0.
///
/// The mixed-fault runs use a few fixed seeds; `STOREBACKUP_LOSSY_SEEDS=N` runs N seeds.
final class LossyNetworkTests: XCTestCase {
    var servers: TestServers!
    var work = ""
    var store = ""
    private var folderCount = 0

    override func setUpWithError() throws {
        servers = try TestServers(label: "lossy")
        work = try TestEnvironment.temporaryDirectory("lossy")
        store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 500, blobCount: 4)
    }

    override func tearDownWithError() throws {
        servers.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    /// One destination: how to name a folder on it, directly or through a proxy port.
    struct Target {
        var label: String
        /// The server's own port (the proxy's upstream).
        var port: Int
        var environment: [String: String]
        /// Command-line arguments (`--to …` and friends) for `folder`, through `proxyPort` when given.
        var arguments: (_ folder: String, _ proxyPort: Int?) throws -> [String]
        /// The local folder where the server keeps `folder`'s files, when it is on this machine.
        var localFolder: ((_ folder: String) -> String)?
        /// What the server holds for `folder`, read on its side.
        var contents: (_ folder: String) throws -> ServerContents
    }

    /// Quick retries, enough to heal the faults injected here.
    static let retryEnvironment = ["STOREBACKUP_RETRY_ATTEMPTS": "6", "STOREBACKUP_RETRY_OPERATIONS": "3"]

    /// A backend of the destination contract, for the command line with quick retries.
    func target(_ backend: ContractBackend) -> Target {
        Target(
            label: backend.label, port: backend.port!, environment: backend.environment.merging(Self.retryEnvironment) { a, _ in a },
            arguments: { folder, proxy in try backend.arguments(folder, "--to", proxy) }, localFolder: backend.localFolder,
            contents: backend.contents)
    }

    func s3Target(_ kind: String) throws -> Target { target(ContractBackend.s3(try servers.start(kind), work: work)) }
    func webDAVTarget() throws -> Target { target(ContractBackend.webDAV(try servers.start("webdav"), work: work)) }
    func sftpTarget() throws -> Target { target(try ContractBackend.sftp(try servers.start("sftp"), work: work)) }

    // MARK: the scenarios, per destination

    func testS3OnRclone() throws { try runHTTPScenarios(try s3Target("s3"), publish: .s3) }
    func testS3OnMoto() throws { try runHTTPScenarios(try s3Target("moto"), publish: .s3) }
    func testWebDAV() throws { try runHTTPScenarios(try webDAVTarget(), publish: .webDAV) }

    enum Publish { case s3, webDAV }

    func runHTTPScenarios(_ target: Target, publish: Publish) throws {
        // 1. The answer to the publishing request is lost (the server acted).
        let publishing: [String: Any] =
            publish == .s3
            ? ["method": "POST", "path_contains": "uploadId=", "fault": "reset", "phase": "before_response", "times": 1]
            : ["method": "MOVE", "fault": "reset", "phase": "before_response", "times": 1]
        if publish == .s3 {
            // Large enough for a multipart upload, so publishing is CompleteMultipartUpload.
            try shell("head -c 35651584 /dev/urandom > '\(store)/.App_SUPPORT/video.bin'")
        }
        try expectHealed(target, "lost answer to publish", rules: [publishing])
        if publish == .s3 {
            try FileManager.default.removeItem(atPath: store + "/.App_SUPPORT/video.bin")
            // The same for a single PUT.
            try expectHealed(
                target, "lost answer to PUT", rules: [["method": "PUT", "fault": "reset", "phase": "before_response", "times": 1]])
        }

        // 2. One byte of the upload flipped on the wire (S3: the object; WebDAV: the temporary).
        try expectHealed(
            target, "flipped byte", rules: [["method": "PUT", "path_contains": ".zip", "fault": "flip", "times": 1]],
            expectFault: "flip")

        // 3. A cut download, resumed and answered with 200 + Content-Range.
        let folder = nextFolder()
        let created = try runStoreBackup(["create", store] + (try target.arguments(folder, nil)), environment: target.environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let proxy = try startProxy(
            target,
            rules: [
                ["method": "GET", "path_contains": "Stores.zip", "fault": "reset", "phase": "response", "after_bytes": 20000, "times": 1],
                ["method": "GET", "path_contains": "Stores.zip", "fault": "range200"],
            ])
        let verified = try runStoreBackup(
            ["verify", "latest"] + (try target.arguments(folder, proxy.port)), environment: target.environment)
        XCTAssertEqual(verified.status, 0, "\(target.label) resumed download: \(verified.stderr)")
        XCTAssertTrue(try proxy.log().contains("reset response"), "the download was cut")

        // 4. A reset while the connection is being set up (TCP).
        try expectHealed(
            target, "reset at connect", rules: [["requests": [1, 2], "fault": "reset", "phase": "response", "after_bytes": 0]],
            tcp: true, expectFault: "reset after 0")

        // 5. 30 % mixed faults, several seeds: honest either way, and healed at least once.
        var healed: [Int] = []
        for seed in try seeds {
            let succeeded = try expectHonest(
                target, "mixed seed \(seed)", seed: seed,
                rules: [
                    ["probability": 0.06, "fault": "500"],
                    ["probability": 0.06, "fault": "reset", "phase": "request"],
                    ["probability": 0.06, "fault": "reset", "phase": "before_response"],
                    ["probability": 0.06, "fault": "reset", "phase": "response"],
                    ["method": "PUT", "probability": 0.06, "fault": "flip"],
                ])
            if succeeded { healed.append(seed) }
        }
        try assertSomeSeedHealed(healed, target)
    }

    func testSFTP() throws {
        let target = try sftpTarget()
        // Connections of one create: preflight list and probe, the list that picks the name
        // (after the newest backup), the upload's list, PUT, rename, list.
        // 1. The rename went through, its answer was lost (reset the moment the name exists).
        let folder = nextFolder()
        try expectHealed(
            target, "lost answer to rename", folder: folder,
            rules: [["fault": "reset", "until_exists": target.localFolder!(folder) + "/*Stores.zip", "times": 1]],
            tcp: true, expectFault: "exists")
        // ... and the connection dies before the rename (the rename's own connection).
        try expectHealed(
            target, "reset before rename", rules: [["requests": [6], "fault": "reset", "phase": "response", "after_bytes": 0]],
            tcp: true, expectFault: "reset after 0")
        // 2. A flipped byte in the upload's stream (SSH's MAC refuses it: the connection dies).
        try expectHealed(
            target, "flipped byte", rules: [["requests": [5], "fault": "flip", "after_bytes": 60000, "times": 1]],
            tcp: true, expectFault: "flip")
        // 3. A cut download resuming is in DestinationContractTests.
        // 4. A reset in each phase of SSH set-up: at connect, inside the banner, during key
        //    exchange (server and client side), during authentication.
        for (phase, bytes) in [("response", 0), ("response", 8), ("response", 600), ("request", 200), ("request", 2000)] {
            try expectHealed(
                target, "ssh set-up reset \(phase) \(bytes)",
                rules: [["requests": [1, 3], "fault": "reset", "phase": phase, "after_bytes": bytes]],
                tcp: true, expectFault: "reset after")
        }
        // 5. 30 % of connections cut somewhere, several seeds: honest, and healed at least once.
        var healed: [Int] = []
        for seed in try seeds {
            let succeeded = try expectHonest(
                target, "mixed seed \(seed)", seed: seed,
                rules: [
                    ["probability": 0.1, "fault": "reset", "phase": "response", "after_bytes": 3000],
                    ["probability": 0.1, "fault": "reset", "phase": "request", "after_bytes": 30000],
                    ["probability": 0.1, "fault": "reset", "phase": "response", "after_bytes": 100],
                ], tcp: true)
            if succeeded { healed.append(seed) }
        }
        try assertSomeSeedHealed(healed, target)
    }

    /// TLS: a handshake cut by a reset (before any byte, inside the server's hello) is
    /// retried, and reported as an interrupted handshake rather than a certificate problem.
    func testTLSHandshakeResetsHeal() throws {
        let emulator = try DropboxEmulatorClient(label: "lossy-tls")
        defer { emulator.stop() }
        let api = URL(string: emulator.apiURL)!
        let content = URL(string: emulator.contentURL)!
        try XCTSkipUnless(api.port == content.port, "the emulator serves both hosts on one port")
        for bytes in [0, 60, 900] {
            let proxy = try servers.start(
                "proxy",
                arguments: [
                    "--upstream", "127.0.0.1:\(api.port!)", "--tcp", "--plan",
                    try plan([["requests": [1, 2], "fault": "reset", "after_bytes": bytes]]),
                ])
            let port = proxy["port"] as! Int
            var environment = emulator.environment(home: work, token: emulator.accessToken).merging(Self.retryEnvironment) { a, _ in a }
            environment["STOREBACKUP_DROPBOX_API_URL"] = emulator.apiURL.replacingOccurrences(of: ":\(api.port!)", with: ":\(port)")
            environment["STOREBACKUP_DROPBOX_CONTENT_URL"] = emulator.contentURL.replacingOccurrences(of: ":\(api.port!)", with: ":\(port)")
            let created = try runStoreBackup(["create", store, "--to", "dropbox:///Lossy\(bytes)"], environment: environment)
            XCTAssertEqual(created.status, 0, "TLS reset after \(bytes) bytes: \(created.stderr)")
            let log = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8)
            XCTAssertTrue(log.contains("reset after \(bytes) server bytes"), log)
        }
    }

    /// A key the server really refuses is still an authentication error with its hint,
    /// after one confirming try; a TLS certificate that does not verify is a TLS error.
    func testRealRefusalsStayPermanentWithTheirHints() throws {
        let target = try sftpTarget()
        let otherKey = work + "/other_key"
        try shell("ssh-keygen -q -t ed25519 -N '' -f '\(otherKey)'")
        var arguments = try target.arguments(nextFolder(), nil)
        arguments[arguments.firstIndex(of: "--ssh-key")! + 1] = otherKey
        let refused = try runStoreBackup(["create", store] + arguments, environment: target.environment)
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("authorized_keys"), refused.stderr)

        let emulator = try DropboxEmulatorClient(label: "lossy-ca")
        defer { emulator.stop() }
        var environment = emulator.environment(home: work, token: emulator.accessToken)
        environment["STOREBACKUP_CA_FILE"] = nil
        let untrusted = try runStoreBackup(["list", "--to", "dropbox:///Backups"], environment: environment)
        XCTAssertNotEqual(untrusted.status, 0)
        XCTAssertTrue(untrusted.stderr.contains("--ca-file"), untrusted.stderr)
    }

    // MARK: classification and cleanup

    func testClassificationFollowsLibcurlCodes() {
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_SSL_CONNECT_ERROR, url: "https://h/"), .connection)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_PEER_FAILED_VERIFICATION, url: "https://h/"), .tls)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_PEER_FAILED_VERIFICATION, url: "sftp://h/"), .hostKey)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_FAILED_INIT, url: "sftp://h/"), .connection)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_FAILED_INIT, url: "https://h/"), .other)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_LOGIN_DENIED, url: "sftp://h/"), .authentication)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_REMOTE_FILE_NOT_FOUND, url: "sftp://h/"), .notFound)
        XCTAssertEqual(TransferClassifier.kind(of: CURLE_RECV_ERROR, url: "https://h/"), .connection)
        let range = ContentRange("bytes 100-199/1000")
        XCTAssertEqual([range?.first, range?.last, range?.total], [100, 199, 1000])
        XCTAssertEqual(ContentRange("bytes 5-9/*")?.total, nil)
        XCTAssertNil(ContentRange("bytes */1000"))
    }

    /// `prune` removes temporaries older than a day (never younger ones, which may be an
    /// upload in progress) on WebDAV and SFTP.
    func testPruneRemovesStaleTemporaries() throws {
        for target in [try webDAVTarget(), try sftpTarget()] {
            let folder = nextFolder()
            let created = try runStoreBackup(["create", store] + (try target.arguments(folder, nil)), environment: target.environment)
            XCTAssertEqual(created.status, 0, created.stderr)
            let local = target.localFolder!(folder)
            try shell(
                "cd '\(local)' && echo x > .storebackup-tmp-1-old.zip && touch -d '3 days ago' .storebackup-tmp-1-old.zip"
                    + " && echo y > .storebackup-tmp-2-new.zip && chmod a+rw .storebackup-tmp-*")
            if target.label == "webdav" {
                // `status --leftovers` counts what prune would remove.
                let configuration = work + "/status.yml"
                try
                    "stores:\n  - name: app\n    path: \(store)\n    destination: \(try target.arguments(folder, nil)[1])\n    schedule: daily 03:00\n"
                    .write(toFile: configuration, atomically: true, encoding: .utf8)
                let status = try runStoreBackup(
                    ["status", "--leftovers", "--json", "--config", configuration],
                    environment: target.environment.merging(["STOREBACKUP_STATE_DIR": work + "/state"]) { _, new in new })
                XCTAssertEqual(status.status, 0, status.stderr)
                XCTAssertTrue(status.stdout.contains("1 unfinished uploads older than a day"), status.stdout)
            }
            let pruned = try runStoreBackup(
                ["prune", "--keep-last", "5", "--yes"] + (try target.arguments(folder, nil)), environment: target.environment)
            XCTAssertEqual(pruned.status, 0, pruned.stderr)
            XCTAssertTrue(pruned.stderr.contains("removed 1 unfinished uploads"), "\(target.label): \(pruned.stderr)")
            let left = try FileManager.default.contentsOfDirectory(atPath: local).filter { $0.hasPrefix(".storebackup-tmp-") }
            XCTAssertEqual(left, [".storebackup-tmp-2-new.zip"], target.label)
        }
    }

    /// An S3 multipart upload nobody completed or aborted is found and aborted.
    func testIncompleteS3UploadsAreFoundAndAborted() async throws {
        for kind in ["s3", "moto"] {
            let raw = S3RawRequest(server: try servers.start(kind))
            let destination = try S3Destination.make(
                url: "s3://backups/left",
                options: DestinationOptions(
                    s3Endpoint: raw.endpoint,
                    environment: [
                        "AWS_ACCESS_KEY_ID": raw.accessKey, "AWS_SECRET_ACCESS_KEY": raw.secretKey,
                        "AWS_REGION": "us-east-1", "HOME": work,
                    ]))
            try raw.startMultipartUpload("left/x.zip")
            let stale = try await destination.staleUploads(olderThan: 0)
            XCTAssertEqual(stale.map(\.name), ["x.zip"], kind)
            XCTAssertEqual(stale.first?.started == nil, false, "\(kind) reports when it started")
            let removed = try await destination.removeStaleUploads(olderThan: 0)
            XCTAssertEqual(removed.count, 1, kind)
            // The server's own listing, asked by curl: nothing left.
            XCTAssertEqual(try raw.multipartUploads(prefix: "left/"), [], kind)
            // Younger than a day: left alone.
            let young = try await destination.staleUploads(olderThan: 86_400)
            XCTAssertEqual(young, [], kind)
        }
    }

    /// `create` checks the destination before archiving: wrong credentials fail at once.
    func testPreflightRefusesWrongCredentialsBeforeArchiving() throws {
        let target = try webDAVTarget()
        var environment = target.environment
        environment["STOREBACKUP_WEBDAV_PASSWORD"] = "wrong-password-123"
        // A folder with no database: archiving would fail with "no databases"; the
        // destination's refusal comes first.
        let empty = work + "/Empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let created = try runStoreBackup(["create", empty] + (try target.arguments(nextFolder(), nil)), environment: environment)
        XCTAssertEqual(created.status, 1)
        XCTAssertTrue(created.stderr.contains("401"), created.stderr)
        XCTAssertFalse(created.stderr.contains("wrong-password-123"), created.stderr)
    }

    // MARK: helpers

    var seeds: [Int] {
        get throws {
            let count = try TestEnvironment.count("STOREBACKUP_LOSSY_SEEDS", default: 3, floor: 1)
            return Array(1...count)
        }
    }

    func nextFolder() -> String {
        folderCount += 1
        return "lossy-\(folderCount)"
    }

    struct Proxy {
        let port: Int
        let logFile: String
        func log() throws -> String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }
        /// The faults that struck, one per log entry that has one.
        func faults() throws -> [String] {
            try log().split(separator: "\n").compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["fault"] as? String
            }
        }
    }

    func startProxy(_ target: Target, rules: [[String: Any]], seed: Int = 1, tcp: Bool = false) throws -> Proxy {
        let info = try servers.start(
            "proxy",
            arguments: ["--upstream", "127.0.0.1:\(target.port)", "--plan", try plan(rules, seed: seed)]
                + (tcp ? ["--tcp"] : []))
        return Proxy(port: info["port"] as! Int, logFile: info["log"] as! String)
    }

    /// A create through the fault must succeed and leave exactly its verified backup.
    func expectHealed(
        _ target: Target, _ what: String, folder: String? = nil, rules: [[String: Any]], tcp: Bool = false,
        expectFault: String = "reset"
    ) throws {
        let folder = folder ?? nextFolder()
        let proxy = try startProxy(target, rules: rules, tcp: tcp)
        let created = try runStoreBackup(["create", store] + (try target.arguments(folder, proxy.port)), environment: target.environment)
        let label = "\(target.label), \(what)"
        XCTAssertEqual(created.status, 0, "\(label): \(created.stderr)")
        let log = try proxy.log()
        XCTAssertTrue(log.contains(expectFault), "\(label): the fault struck: \(log)")
        try checkHonest(target, folder: folder, created, label)
        if let local = target.localFolder?(folder) {
            let leftovers = ((try? FileManager.default.contentsOfDirectory(atPath: local)) ?? []).filter {
                $0.hasPrefix(".storebackup-tmp-")
            }
            XCTAssertEqual(leftovers, [], "\(label): no temporaries left")
        }
    }

    /// Honest failures alone would pass every mixed-fault run even if retries healed nothing:
    /// at least one seed must end in a backup (each success was restored and compared).
    func assertSomeSeedHealed(_ healed: [Int], _ target: Target) throws {
        let seeds = try self.seeds
        print("LossyNetworkTests: \(target.label): mixed seeds \(seeds) succeeded: \(healed)")
        XCTAssertFalse(healed.isEmpty, "\(target.label): no mixed-fault seed of \(seeds) ended in a backup: nothing healed")
    }

    /// A create through random faults ends honestly, whichever way, judged on the server's
    /// side: exit 0 leaves exactly the printed backup stored and nothing unfinished, and it
    /// restores (directly, no proxy) to the store; exit 1 leaves no backup stored, only
    /// temporaries, which `prune` removes once they are old. Some fault must strike (from the
    /// proxy's log). Returns whether the create succeeded.
    func expectHonest(_ target: Target, _ what: String, seed: Int, rules: [[String: Any]], tcp: Bool = false) throws -> Bool {
        let folder = nextFolder()
        let label = "\(target.label), \(what)"
        let tree = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)
        let proxy = try startProxy(target, rules: rules, seed: seed, tcp: tcp)
        let created = try runStoreBackup(["create", store] + (try target.arguments(folder, proxy.port)), environment: target.environment)
        let faults = try proxy.faults()
        let log = try proxy.log()
        XCTAssertFalse(faults.isEmpty, "\(label): no fault struck, the run tested nothing: \(log)")
        print("LossyNetworkTests: \(label): exit \(created.status) after \(faults.count) faults: \(faults)")
        try checkHonest(target, folder: folder, created, label)
        let held = try target.contents(folder)
        XCTAssertEqual(held.unfinished, [], "\(label): unfinished uploads left on the server")
        if created.status == 0 {
            let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            XCTAssertEqual(held.stored.keys.sorted(), [name], "\(label): the server holds exactly the new backup")
            let restored = work + "/restored-" + folder
            let restore = try runStoreBackup(
                ["restore", name, restored, "--yes"] + (try target.arguments(folder, nil)), environment: target.environment)
            XCTAssertEqual(restore.status, 0, "\(label): restore: \(restore.stderr)")
            XCTAssertEqual(
                try StoreFixture.describe(restored, includeJournals: false, includeDatabaseContent: false), tree,
                "\(label): the restored store")
            XCTAssertEqual(
                try StoreFixture.query(restored + "/App.sqlite", "SELECT count(*) FROM log"),
                try StoreFixture.query(store + "/App.sqlite", "SELECT count(*) FROM log"), "\(label): the restored log")
        } else {
            let kept = held.stored.keys.filter { !$0.hasPrefix(".storebackup-tmp-") }
            XCTAssertEqual(kept, [], "\(label): a failed create left something other than a temporary on the server")
            if !held.stored.isEmpty {
                // Temporaries younger than a day may be an upload in progress: age them, then
                // prune (straight to the server) must remove every one.
                let local = try XCTUnwrap(target.localFolder?(folder), "\(label): temporaries where none can be made")
                for name in held.stored.keys { try shell("touch -d '3 days ago' '\(local)/\(name)'") }
                let pruned = try runStoreBackup(
                    ["prune", "--keep-last", "5", "--yes"] + (try target.arguments(folder, nil)),
                    environment: target.environment)
                XCTAssertEqual(pruned.status, 0, "\(label): prune: \(pruned.stderr)")
                XCTAssertEqual(try target.contents(folder).stored, [:], "\(label): prune removed what the failed create left")
            }
        }
        return created.status == 0
    }

    /// Exit 0: exactly the printed backup is listed and verifies (checked directly, no proxy).
    /// Otherwise: exit 1 and nothing listed (a temporary whose removal failed too may stay: `prune` cleans those).
    func checkHonest(_ target: Target, folder: String, _ created: CommandResult, _ label: String) throws {
        let direct = try target.arguments(folder, nil)
        let listed = try runStoreBackup(["list", "--json"] + direct, environment: target.environment)
        XCTAssertEqual(listed.status, 0, "\(label): list: \(listed.stderr)")
        let names = ((try? JSONSerialization.jsonObject(with: Data(listed.stdout.utf8))) as? [[String: Any]] ?? []).compactMap {
            $0["name"] as? String
        }
        if created.status == 0 {
            let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            XCTAssertEqual(names, [name], "\(label): exactly the new backup is listed")
            let verified = try runStoreBackup(["verify", name] + direct, environment: target.environment)
            XCTAssertEqual(verified.status, 0, "\(label): the published backup verifies: \(verified.stderr)")
        } else {
            XCTAssertEqual(created.status, 1, "\(label): \(created.stderr)")
            XCTAssertEqual(names, [], "\(label): a failed create leaves nothing listed")
        }
    }

    func plan(_ rules: [[String: Any]], seed: Int = 1) throws -> String {
        let path = work + "/plan-\(UUID().uuidString.prefix(8)).json"
        try JSONSerialization.data(withJSONObject: ["seed": seed, "rules": rules]).write(to: URL(fileURLWithPath: path))
        return path
    }
}
