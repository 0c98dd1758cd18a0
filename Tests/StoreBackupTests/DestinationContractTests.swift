import Foundation
import XCTest

@testable import StoreBackup

/// The contract every destination keeps, written once and run against each backend: a
/// local folder, S3 on rclone (signatures checked) and on moto, WebDAV (Apache), SFTP
/// (OpenSSH) and the Dropbox emulator. Each scenario loops over the backends; every
/// message starts with the backend's label. One server per backend serves the whole class.
///
/// Only the public protocol is used (upload, list, download, delete), through
/// `DestinationResolver` as the command line does, so each remote destination is wrapped
/// in its retry policy. Faults come from the fault proxy in front of the real server.
final class DestinationContractTests: XCTestCase {
    /// The servers and backends the scenarios share.
    final class Shared {
        let servers: TestServers
        let dropbox: DropboxEmulatorClient
        let work: String
        let backends: [ContractBackend]

        init() throws {
            servers = try TestServers(label: "contract")
            do {
                dropbox = try DropboxEmulatorClient(label: "contract-dropbox")
            } catch {
                servers.stop()
                throw error
            }
            do {
                work = try TestEnvironment.temporaryDirectory("contract")
                backends = try ContractBackend.all(servers: servers, dropbox: dropbox, work: work)
            } catch {
                servers.stop()
                dropbox.stop()
                throw error
            }
        }

        func stop() {
            servers.stop()
            dropbox.stop()
            try? FileManager.default.removeItem(atPath: work)
        }
    }

    nonisolated(unsafe) private static var shared: Result<Shared, Error>?

    override class func setUp() {
        super.setUp()
        shared = Result { try Shared() }
    }

    override class func tearDown() {
        if case .success(let shared) = shared { shared.stop() }
        shared = nil
        super.tearDown()
    }

    private var context: Shared { get throws { try XCTUnwrap(Self.shared).get() } }

    /// No retries: a fault is final.
    static let once = RetryPolicy(requestAttempts: 1, operationAttempts: 1, initialDelay: 0.01, maximumDelay: 0.02)
    /// A few quick retries: enough to heal the faults injected here.
    static let healing = RetryPolicy(requestAttempts: 4, operationAttempts: 2, initialDelay: 0.02, maximumDelay: 0.1)

    static let size = 3 << 20

    /// A file of random bytes under a fresh name (an upload may move its file away).
    func file(_ content: Data) throws -> String {
        let path = try context.work + "/upload-\(UUID().uuidString.prefix(8))"
        try content.write(to: URL(fileURLWithPath: path))
        return path
    }

    func randomData(_ count: Int = DestinationContractTests.size) -> Data {
        let random = FileHandle(forReadingAtPath: "/dev/urandom")!
        defer { try? random.close() }
        return random.readData(ofLength: count)
    }

    /// A fresh folder name per scenario, so scenarios never see each other's backups.
    func freshFolder(_ scenario: String) -> String { "contract-\(scenario)-\(UUID().uuidString.prefix(6))" }

    // MARK: publishing

    /// While an upload is under way (held at a progress report part-way), the backup is not
    /// listed; once it returns, it is, whole.
    func testPublishIsAtomic() async throws {
        for backend in try context.backends {
            let folder = freshFolder("atomic")
            let destination = try backend.make(folder, nil, Self.once)
            let name = "2026-01-01 000000 Stores.zip"
            let gate = UploadGate()
            let content = randomData()
            let path = try file(content)
            let before = try backend.contents(folder).unfinished
            let upload = Task {
                defer { gate.ended() }
                try await destination.upload(file: path, as: name, progress: { gate.hold(at: $0) })
            }
            while !gate.isHeld && !gate.hasEnded { try await Task.sleep(nanoseconds: 2_000_000) }
            if gate.isHeld {
                let during = try await destination.listBackups()
                XCTAssertEqual(during.map(\.name), [], "[\(backend.label)] listed before the upload finished")
            } else {
                XCTFail("[\(backend.label)] the upload reported no progress part-way")
            }
            gate.release()
            try await upload.value
            let after = try await destination.listBackups()
            XCTAssertEqual(after.map(\.name), [name], "[\(backend.label)]")
            XCTAssertEqual(after.first?.size, Int64(Self.size), "[\(backend.label)] listed whole")
            try backend.assertHolds(
                [name: ServerContents.sha256(content)], in: folder, unfinishedBefore: before, "after a published upload")
        }
    }

    func testAnExistingBackupIsNeverOverwritten() async throws {
        for backend in try context.backends {
            let folder = freshFolder("overwrite")
            let destination = try backend.make(folder, nil, Self.once)
            let name = "2026-05-01 120000 Stores.zip"
            let first = randomData(100_000)
            let before = try backend.contents(folder).unfinished
            try await destination.upload(file: try file(first), as: name, progress: nil)
            try backend.assertHolds([name: ServerContents.sha256(first)], in: folder, unfinishedBefore: before, "after the first upload")
            do {
                try await destination.upload(file: try file(randomData(120_000)), as: name, progress: nil)
                XCTFail("[\(backend.label)] a second upload under the same name must be refused")
            } catch {
                XCTAssertTrue("\(error)".contains("already exists"), "[\(backend.label)] \(error)")
            }
            let back = try context.work + "/back-\(UUID().uuidString.prefix(8))"
            try await destination.download(name, to: back, progress: nil)
            XCTAssertEqual(FileManager.default.contents(atPath: back), first, "[\(backend.label)] the first backup is kept")
            // Dropbox keeps a refused upload's bytes as an upload session the client could
            // finish elsewhere (its id comes with the error); no client can cancel one.
            let refusedSessions = backend.label == "dropbox" ? try backend.contents(folder).unfinished : []
            try backend.assertHolds(
                [name: ServerContents.sha256(first)], in: folder, unfinishedBefore: before.union(refusedSessions),
                "the first backup is kept and the refused upload left nothing")
        }
    }

    // MARK: listing

    /// Only `… Stores.zip` objects of the folder itself are backups, newest first.
    func testListShowsOnlyBackupsNewestFirst() async throws {
        for backend in try context.backends {
            let folder = freshFolder("list")
            let destination = try backend.make(folder, nil, Self.once)
            let names = ["2026-01-01 000000 Stores.zip", "2026-03-01 000000 Stores.zip", "[2026-Feb-01] 10.15 PM Stores.zip"]
            for (index, name) in names.enumerated() {
                try await destination.upload(file: try file(randomData(8_000 + 8 * index)), as: name, progress: nil)
            }
            // Not backups: another file, a partial name, a temporary's name, a backup in a
            // subfolder, a folder named like a backup.
            for foreign in [
                "notes.txt", "2026-04-01 000000 Stores.zip.part", ".storebackup-tmp-1-x.zip",
                "old/2026-05-01 000000 Stores.zip", "2026-06-01 000000 Stores.zip/inner.txt",
            ] {
                try backend.putForeign(folder, foreign)
            }
            let listed = try await destination.sortedBackups()
            XCTAssertEqual(
                listed.map(\.name), ["2026-03-01 000000 Stores.zip", "[2026-Feb-01] 10.15 PM Stores.zip", "2026-01-01 000000 Stores.zip"],
                "[\(backend.label)]")
            XCTAssertEqual(listed.map(\.size), [8_008, 8_016, 8_000], "[\(backend.label)]")
            let missing = try await backend.make(folder + "/no/such/folder", nil, Self.once).listBackups()
            XCTAssertEqual(missing.map(\.name), [], "[\(backend.label)] a folder that does not exist lists empty")
        }
    }

    // MARK: downloading

    /// A download into a file holding the start of the backup fetches only the rest: the
    /// bytes the server sent (counted by the proxy in front of it) are fewer than the backup.
    func testADownloadResumesAPartialFile() async throws {
        for backend in try context.backends {
            let folder = freshFolder("resume")
            let content = randomData()
            let name = "2026-02-02 020202 Stores.zip"
            try await backend.make(folder, nil, Self.once).upload(file: try file(content), as: name, progress: nil)
            let target = try context.work + "/partial-\(UUID().uuidString.prefix(8))"
            guard backend.port != nil else {
                // A local backup is read in place by restore: nothing to resume.
                try await backend.make(folder, nil, Self.once).download(name, to: target, progress: nil)
                XCTAssertEqual(FileManager.default.contents(atPath: target), content, "[\(backend.label)]")
                continue
            }
            let partial = 2 << 20
            try content.prefix(partial).write(to: URL(fileURLWithPath: target))
            let proxy = try ContractProxy(servers: context.servers, backend: backend, rules: [], work: context.work)
            try await backend.make(folder, proxy.port, Self.once).download(name, to: target, progress: nil)
            XCTAssertEqual(FileManager.default.contents(atPath: target), content, "[\(backend.label)]")
            let rest = Self.size - partial
            let entries = proxy.entries { $0.contains { ($0["down_bytes"] as? Int ?? 0) >= rest } }
            let served = entries.reduce(0) { $0 + ($1["down_bytes"] as? Int ?? 0) }
            XCTAssertGreaterThanOrEqual(served, rest, "[\(backend.label)] the rest arrived through the proxy")
            XCTAssertLessThan(served, partial, "[\(backend.label)] \(served) bytes served: the whole backup was sent again")
        }
    }

    // MARK: deleting

    func testDeleteRemovesTheBackupAndAnUnknownNameIsNotFound() async throws {
        for backend in try context.backends {
            let folder = freshFolder("delete")
            let destination = try backend.make(folder, nil, Self.once)
            let kept = "2026-06-01 000000 Stores.zip", gone = "2026-06-02 000000 Stores.zip"
            let keptContent = randomData(5_000)
            let before = try backend.contents(folder).unfinished
            try await destination.upload(file: try file(keptContent), as: kept, progress: nil)
            try await destination.upload(file: try file(randomData(5_000)), as: gone, progress: nil)
            try await destination.delete(gone)
            let listed = try await destination.listBackups()
            XCTAssertEqual(listed.map(\.name), [kept], "[\(backend.label)]")
            try backend.assertHolds([kept: ServerContents.sha256(keptContent)], in: folder, unfinishedBefore: before, "after the delete")
            do {
                try await destination.delete(gone)
                XCTFail("[\(backend.label)] deleting it again must fail")
            } catch {
                XCTAssertTrue("\(error)".contains("no backup named \"\(gone)\""), "[\(backend.label)] \(error)")
            }
            do {
                try await destination.download(gone, to: try context.work + "/nothing-\(UUID().uuidString.prefix(8))", progress: nil)
                XCTFail("[\(backend.label)] downloading a deleted backup must fail")
            } catch {
                XCTAssertTrue("\(error)".contains("no backup named \"\(gone)\""), "[\(backend.label)] \(error)")
            }
        }
    }

    // MARK: the command line

    /// create, list, restore and delete through the command line and the URL resolver, each
    /// run under `strace -f`: no secret (S3 secret key, WebDAV password, SSH private key,
    /// Dropbox token) appears in the argv of storebackup or of any process it starts, nor
    /// in what it prints.
    func testCommandLineRoundTripKeepsSecretsOutOfEveryArgv() async throws {
        let work = try context.work
        let store = work + "/Stores"
        if !FileSystem.isDirectory(store) { try StoreFixture.make(at: store) }
        for backend in try context.backends {
            let folder = freshFolder("cli")
            let label = backend.label
            let unfinishedBefore = try backend.contents(folder).unfinished
            var outputs: [CommandResult] = []
            func run(_ arguments: [String]) throws -> CommandResult {
                let trace = work + "/strace-\(UUID().uuidString.prefix(8))"
                let result = try runTool(
                    "/usr/bin/strace",
                    [
                        "-f", "-qq", "-e", "trace=execve", "-s", "65536", "-o", trace,
                        TestEnvironment.binary,
                    ] + arguments, environment: backend.environment)
                let execs = (try? String(contentsOfFile: trace, encoding: .utf8)) ?? ""
                XCTAssertTrue(execs.contains("execve(\"\(TestEnvironment.binary)\""), "[\(label)] strace saw the command: \(execs)")
                for secret in backend.secrets where execs.contains(secret) {
                    XCTFail("[\(label)] a secret is in an argv: \(arguments.first ?? "")")
                }
                outputs.append(result)
                return result
            }
            let created = try run(["create", store] + (try backend.arguments(folder, "--to", nil)))
            XCTAssertEqual(created.status, 0, "[\(label)] \(created.stderr)")
            let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let listed = try run(["list", "--json"] + (try backend.arguments(folder, "--to", nil)))
            let rows = (try? JSONSerialization.jsonObject(with: Data(listed.stdout.utf8))) as? [[String: Any]]
            XCTAssertEqual(rows?.compactMap { $0["name"] as? String }, [name], "[\(label)] \(listed.stderr)")
            let restored = work + "/Restored-\(folder)/Stores"
            let restore = try run(["restore", "latest", restored, "--yes"] + (try backend.arguments(folder, "--from", nil)))
            XCTAssertEqual(restore.status, 0, "[\(label)] \(restore.stderr)")
            XCTAssertEqual(
                try StoreFixture.describe(restored, includeJournals: false), try StoreFixture.describe(store, includeJournals: false),
                "[\(label)] the restored store is the original")
            let deleted = try run(["delete", name, "--yes"] + (try backend.arguments(folder, "--to", nil)))
            XCTAssertEqual(deleted.status, 0, "[\(label)] \(deleted.stderr)")
            let remaining = try await backend.make(folder, nil, Self.once).listBackups()
            XCTAssertEqual(remaining.map(\.name), [], "[\(label)] deleted")
            try backend.assertHolds([:], in: folder, unfinishedBefore: unfinishedBefore, "after create and delete")
            for output in outputs {
                for secret in backend.secrets where (output.stdout + output.stderr).contains(secret) {
                    XCTFail("[\(label)] a secret is in the output")
                }
            }
        }
    }

    // MARK: failures and retries

    /// An upload whose connection dies part-way, with no retry, fails and leaves nothing
    /// listed (and no temporary where the storage is visible). The local folder's fault is
    /// a file size limit (RLIMIT_FSIZE) that stops the copy part-way.
    func testAFailureMidUploadLeavesNothingListed() async throws {
        for backend in try context.backends {
            let folder = freshFolder("failed")
            let name = "2026-07-01 000000 Stores.zip"
            let path = try file(randomData())
            let before = try backend.contents(folder).unfinished
            do {
                if backend.port == nil {
                    let destination = try backend.make(folder, nil, Self.once)
                    try await FileSizeLimit.during(1 << 20) { try await destination.upload(file: path, as: name, progress: nil) }
                } else {
                    let proxy = try ContractProxy(
                        servers: context.servers, backend: backend,
                        rules: [
                            backend.tcpProxy
                                ? ["fault": "reset", "phase": "request", "after_bytes": 300_000]
                                : ["method": "PUT", "fault": "reset", "phase": "request", "after_bytes": 262_144]
                        ], work: context.work)
                    try await backend.make(folder, proxy.port, Self.once).upload(file: path, as: name, progress: nil)
                }
                XCTFail("[\(backend.label)] the upload should fail")
            } catch {
                XCTAssertTrue("\(error)".contains(folder), "[\(backend.label)] the error says where: \(error)")
            }
            let listed = try await backend.make(folder, nil, Self.once).listBackups()
            XCTAssertEqual(listed.map(\.name), [], "[\(backend.label)] a failed upload is not listed")
            try backend.assertHolds([:], in: folder, unfinishedBefore: before, "after a failed upload")
        }
    }

    /// Nothing listening where the server should be: a clear error naming where, after the
    /// retries, and nothing is listed once the server is reachable again.
    func testAnUnreachableServerIsAClearError() async throws {
        for backend in try context.backends where backend.port != nil {
            let closed = try WebDAVDestinationTests.unusedPort()
            let folder = freshFolder("down")
            let before = try backend.contents(folder).unfinished
            do {
                try await backend.make(folder, closed, Self.healing).upload(
                    file: try file(randomData(1_000)), as: "2026-09-01 000000 Stores.zip", progress: nil)
                XCTFail("[\(backend.label)] the upload must fail")
            } catch {
                XCTAssertTrue(
                    "\(error)".contains("cannot reach") && "\(error)".contains("127.0.0.1:\(closed)"), "[\(backend.label)] \(error)")
                // The cause is structured: recognised by libcurl's code, not by the message's wording.
                guard case StoreBackupError.transfer(let failure)? = error as? StoreBackupError else {
                    XCTFail("[\(backend.label)] not a transfer failure: \(error)"); continue
                }
                XCTAssertEqual(failure.kind, .connection, "[\(backend.label)]")
                XCTAssertEqual(failure.curlCode, 7, "[\(backend.label)] CURLE_COULDNT_CONNECT")
            }
            let listed = try await backend.make(folder, nil, Self.once).listBackups()
            XCTAssertEqual(listed.map(\.name), [], "[\(backend.label)]")
            try backend.assertHolds([:], in: folder, unfinishedBefore: before, "after an upload to a closed port")
        }
    }

    /// Faults the retry wrapper must heal: an error answer (HTTP) or a reset part-way
    /// through the upload, and a reset part-way through the download (which resumes).
    func testInjectedFaultsAreRetriedAndTheBackupArrivesWhole() async throws {
        for backend in try context.backends where backend.port != nil {
            let folder = freshFolder("faults")
            let rules: [[String: Any]] =
                backend.tcpProxy
                ? [
                    ["fault": "reset", "phase": "request", "after_bytes": 300_000, "times": 1],
                    ["fault": "reset", "phase": "response", "after_bytes": 1_500_000, "times": 1],
                ]
                : [
                    ["requests": [1], "fault": "503", "retry_after": NSNull()],
                    ["method": "PUT", "requests": [1], "fault": "reset", "phase": "request", "after_bytes": 262_144],
                    [
                        "method": "GET", "path_contains": "Stores.zip", "requests": [1], "fault": "reset", "phase": "response",
                        "after_bytes": 1_048_576,
                    ],
                ]
            let proxy = try ContractProxy(servers: context.servers, backend: backend, rules: rules, work: context.work)
            let destination = try backend.make(folder, proxy.port, Self.healing)
            let content = randomData()
            let before = try backend.contents(folder).unfinished
            let name = "2026-08-01 000000 Stores.zip"
            try await destination.upload(file: try file(content), as: name, progress: nil)
            let listed = try await destination.listBackups()
            XCTAssertEqual(listed.map(\.name), [name], "[\(backend.label)]")
            let target = try context.work + "/healed-\(UUID().uuidString.prefix(8))"
            try await destination.download(name, to: target, progress: nil)
            XCTAssertEqual(FileManager.default.contents(atPath: target), content, "[\(backend.label)] the backup arrived whole")
            let faults = ContractProxy.faults(proxy.entries { ContractProxy.faults($0).count >= rules.count })
            XCTAssertEqual(faults.count, rules.count, "[\(backend.label)] each planned fault struck once: \(faults)")
            try backend.assertHolds([name: ServerContents.sha256(content)], in: folder, unfinishedBefore: before, "after healed faults")
        }
    }
}

/// Holds an upload at its first progress report part-way (more than nothing, less than
/// all), until the test has looked at the destination.
// Sendable by hand: its flags are only touched under `lock`, and semaphores are thread-safe.
final class UploadGate: @unchecked Sendable {
    private let lock = NSLock()
    private var held = false
    private var finished = false
    private let released = DispatchSemaphore(value: 0)

    var isHeld: Bool { lock.withLock { held } }
    var hasEnded: Bool { lock.withLock { finished } }

    func hold(at progress: BackupProgress) {
        guard progress.phase == .uploading, progress.bytesDone > 0, progress.bytesDone < progress.bytesTotal else { return }
        let first: Bool = lock.withLock {
            defer { held = true }
            return !held
        }
        // Bounded: a test that never releases cannot hang the upload forever.
        if first { _ = released.wait(timeout: .now() + 60) }
    }

    func release() { released.signal() }
    func ended() { lock.withLock { finished = true } }
}

/// A file size limit for this process (RLIMIT_FSIZE, SIGXFSZ ignored so a write past it
/// fails with EFBIG): a disk that fills up part-way, for the local folder.
enum FileSizeLimit {
    static func during<T>(_ bytes: Int, _ work: () async throws -> T) async throws -> T {
        var saved = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &saved)
        var limited = saved
        limited.rlim_cur = rlim_t(bytes)
        let previousHandler = signal(SIGXFSZ, SIG_IGN)
        setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limited)
        defer {
            setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &saved)
            signal(SIGXFSZ, previousHandler)
        }
        return try await work()
    }
}
