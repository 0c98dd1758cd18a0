import Foundation
import XCTest

@testable import StoreBackup

/// The Dropbox destination against the Dropbox API emulator (HTTPS with its own CA,
/// bearer tokens, OAuth with PKCE and refresh, upload sessions, faults on demand).
/// Tokens reach storebackup only through the environment or a credentials file.
final class DropboxDestinationTests: XCTestCase, WorkFolderTest {
    var emulator: DropboxEmulatorClient!
    var work = ""

    /// Quick retries: the tests' failures are meant to be final, not to heal.
    static let retry = RetryPolicy(requestAttempts: 2, operationAttempts: 1, initialDelay: 0.02, maximumDelay: 0.1)

    override func setUpWithError() throws {
        emulator = try DropboxEmulatorClient(label: "dropbox")
        work = try TestEnvironment.temporaryDirectory("dropbox")
    }

    override func tearDownWithError() throws {
        emulator?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    func options(token: String? = nil, retry: RetryPolicy = DropboxDestinationTests.retry) -> DestinationOptions {
        DestinationOptions(retry: retry, environment: emulator.environment(home: work, token: token ?? emulator.accessToken))
    }

    func destination(_ url: String = "dropbox:///Backups", options: DestinationOptions? = nil) throws -> DropboxDestination {
        try DropboxDestination.make(url: url, options: options ?? self.options())
    }

    /// Routes and statuses the emulator saw, in order.
    func requests() throws -> [(route: String, status: Int)] {
        try emulator.log().map { ($0["route"] as? String ?? "", $0["status"] as? Int ?? -1) }
    }

    // MARK: round trip

    /// Which names are listed is in the destination contract; Dropbox's own part is paging
    /// through `list_folder/continue`.
    func testListingPagesThrough() async throws {
        try emulator.control("config", ["page_size": 2])
        let destination = try destination()
        var names: [String] = []
        for index in 0..<5 {
            let name = "2026-01-0\(index + 1) 000000 Stores.zip"
            try await destination.upload(file: try makeFile("f\(index).zip", bytes: 1000 + index), as: name, progress: nil)
            names.append(name)
        }
        let listed = try await destination.sortedBackups()
        XCTAssertEqual(listed.map(\.name), names.reversed())
        XCTAssertNotNil(listed.first?.modified)
        XCTAssertGreaterThan(try requests().filter { $0.route == "/2/files/list_folder/continue" }.count, 1)
    }

    /// A backup storebackup uploads downloads intact with Dropbox's official Python SDK,
    /// and one the SDK uploads (under the seed app's name style) is listed and restored.
    func testInteroperatesWithTheOfficialPythonSDK() throws {
        guard (try? runPython(["-c", "import dropbox"], environment: [:])) != nil else {
            throw XCTSkip("the official Dropbox SDK is not installed (pip install dropbox)")
        }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 200, blobCount: 4)
        let environment = emulator.environment(home: work, token: emulator.accessToken)

        // storebackup → SDK: download with the SDK into a local folder, restore from there.
        let created = try runStoreBackup(["create", store, "--to", "dropbox:///Backups"], environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let local = work + "/local"
        try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true)
        try runSDK(["download", "/Backups/" + name, local + "/" + name])
        let fromSDK = work + "/FromSDK/Stores"
        let restored = try runStoreBackup(["restore", name, fromSDK, "--yes", "--from", local], environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertEqual(try StoreFixture.describe(fromSDK, includeJournals: false), try StoreFixture.describe(store, includeJournals: false))

        // SDK → storebackup: the same archive uploaded by the SDK under a seed-style name.
        let seedName = "[2026-Nov-21] 10.15 PM Stores.zip"
        try runSDK(["upload", local + "/" + name, "/Seed/" + seedName])
        let listed = try runStoreBackup(["list", "--to", "dropbox:///Seed"], environment: environment)
        XCTAssertTrue(listed.stdout.contains(seedName), listed.stdout + listed.stderr)
        let fromSeed = work + "/FromSeed/Stores"
        let seeded = try runStoreBackup(["restore", "latest", fromSeed, "--yes", "--from", "dropbox:///Seed"], environment: environment)
        XCTAssertEqual(seeded.status, 0, seeded.stderr)
        XCTAssertEqual(
            try StoreFixture.describe(fromSeed, includeJournals: false), try StoreFixture.describe(store, includeJournals: false))
    }

    // MARK: upload sessions

    func testLargeArchiveGoesUpInSessionChunksWithMatchingContentHash() async throws {
        var destination = try destination()
        destination.chunkSize = 2 << 20
        let size = (9 << 20) + 123
        let file = try makeFile("big.zip", bytes: size)
        let name = "2026-05-01 000000 Stores.zip"
        let phases = PhaseRecorder()
        try await destination.upload(file: file, as: name, progress: { phases.record($0) })
        XCTAssertTrue(phases.uploadedBytes(total: Int64(size)))

        let routes = try requests().map(\.route)
        XCTAssertEqual(routes.filter { $0 == "/2/files/upload_session/start" }.count, 1)
        XCTAssertEqual(routes.filter { $0 == "/2/files/upload_session/append_v2" }.count, 3)
        XCTAssertEqual(routes.filter { $0 == "/2/files/upload_session/finish" }.count, 1)
        XCTAssertFalse(routes.contains("/2/files/upload"))

        // Dropbox's published algorithm, computed by Python independently of our hasher.
        let expected = try Self.pythonContentHash(file)
        XCTAssertEqual(try emulator.entries()["/backups/" + name.lowercased()]?["content_hash"] as? String, expected)
        XCTAssertEqual(try DropboxContentHasher.hash(file: file, length: Int64(size)), expected)

        let back = work + "/back.zip"
        try await destination.download(name, to: back, progress: nil)
        XCTAssertTrue(FileManager.default.contentsEqual(atPath: back, andPath: file))
    }

    /// A 300 MiB archive through the command line: an upload session of 8 MiB chunks,
    /// streamed from the file, with the process's peak RSS under 64 MiB.
    func testThreeHundredMiBArchiveUploadsWithBoundedMemory() throws {
        let store = work + "/Big"
        try StoreFixture.make(at: store, logRows: 100, blobCount: 1)
        _ = try makeFile("Big/.App_SUPPORT/big.bin", bytes: 300 << 20)
        let peak = try peakRSSKiBOfStoreBackup(
            ["create", store, "--to", "dropbox:///Backups"], environment: emulator.environment(home: work, token: emulator.accessToken))
        XCTAssertLessThan(peak, 64 * 1024, "peak RSS \(peak) KiB")
        let routes = try requests().map(\.route)
        XCTAssertGreaterThanOrEqual(routes.filter { $0 == "/2/files/upload_session/append_v2" }.count, 30)
        let stored = try emulator.entries().values.compactMap { $0["size"] as? Int }
        XCTAssertTrue(stored.contains { $0 > 300 << 20 }, "the whole archive arrived: \(stored)")
    }

    func testAppendWhoseAnswerIsLostResumesFromCorrectOffset() async throws {
        var destination = try destination()
        destination.chunkSize = 1 << 20
        let file = try makeFile("big.zip", bytes: (4 << 20) + 7)
        // The second append is carried out, then the connection drops before the answer:
        // the transport sends it again, and the emulator answers incorrect_offset.
        try emulator.control("faults", ["kinds": ["drop_after"], "routes": ["/2/files/upload_session/append_v2"], "count": 1])
        let name = "2026-05-02 000000 Stores.zip"
        try await destination.upload(file: file, as: name, progress: nil)

        let log = try emulator.log()
        XCTAssertEqual(
            log.filter { $0["route"] as? String == "/2/files/upload_session/start" }.count, 1,
            "the same session goes on: no fresh start")
        let appends = log.filter { $0["route"] as? String == "/2/files/upload_session/append_v2" }
        XCTAssertEqual(appends.first?["fault"] as? String, "drop_after")
        // The repeated append is refused with the session's real offset, and the next
        // append (or the finish) claims exactly that offset.
        let refused = try XCTUnwrap(appends.firstIndex { $0["status"] as? Int == 409 }, "the repeated append was refused")
        let correct = try XCTUnwrap(appends[refused]["correct_offset"] as? Int)
        let sessionCalls = log.filter {
            ($0["route"] as? String ?? "").hasPrefix("/2/files/upload_session/")
                && $0["route"] as? String != "/2/files/upload_session/start"
        }
        let afterRefusal = sessionCalls.drop { $0["seq"] as? Int != appends[refused]["seq"] as? Int }.dropFirst().first
        let cursor = (afterRefusal?["arg"] as? [String: Any])?["cursor"] as? [String: Any]
        XCTAssertEqual(cursor?["offset"] as? Int, correct, "the upload continues at correct_offset: \(String(describing: afterRefusal))")
        let back = work + "/back.zip"
        try await destination.download(name, to: back, progress: nil)
        XCTAssertTrue(FileManager.default.contentsEqual(atPath: back, andPath: file))
    }

    /// Dropbox keeping other bytes than were sent shows in the content hash it reports:
    /// the backup fails and the damaged file is removed, for a single upload and a session.
    func testContentHashMismatchFailsAndRemovesTheUpload() async throws {
        var destination = try destination()
        destination.chunkSize = 1 << 20
        try emulator.control(
            "faults",
            [
                "kinds": ["corrupt_commit"], "count": 2,
                "routes": ["/2/files/upload", "/2/files/upload_session/finish"],
            ])
        for (index, bytes) in [5000, (2 << 20) + 5].enumerated() {
            let name = "2026-05-0\(index + 5) 000000 Stores.zip"
            do {
                try await destination.upload(file: try makeFile("c\(index).zip", bytes: bytes), as: name, progress: nil)
                XCTFail("a corrupted commit must fail the upload")
            } catch {
                XCTAssertTrue("\(error)".contains("does not match the local archive"), "\(error)")
            }
            XCTAssertNil(try emulator.entries()["/backups/" + name.lowercased()], "the damaged upload was removed")
        }
        XCTAssertEqual(try emulator.control("faults", method: "GET")["injected"] as? Int, 2)
    }

    /// Through the retry wrapper, the same damage heals: the upload is removed and sent again.
    func testContentHashMismatchIsRetriedAndHeals() async throws {
        let destination = try destination()
        try emulator.control("faults", ["kinds": ["corrupt_commit"], "count": 1, "routes": ["/2/files/upload"]])
        let name = "2026-05-09 000000 Stores.zip"
        let file = try makeFile("heal.zip", bytes: 5000)
        try await RetryingDestination(
            destination, policy: RetryPolicy(requestAttempts: 2, operationAttempts: 2, initialDelay: 0.02, maximumDelay: 0.1)
        )
        .upload(file: file, as: name, progress: nil)
        XCTAssertEqual(try emulator.control("faults", method: "GET")["injected"] as? Int, 1)
        let back = work + "/healed.zip"
        try await destination.download(name, to: back, progress: nil)
        XCTAssertTrue(FileManager.default.contentsEqual(atPath: back, andPath: file))
    }

    /// Dropbox answers 409 too_many_write_operations when other writes hold the namespace and
    /// documents it as "retry": a busy account delays a backup, it does not fail it.
    func testTooManyWriteOperationsIsRetried() async throws {
        let destination = try destination()
        try emulator.control("faults", ["kinds": ["409_write"], "count": 2, "routes": ["/2/files/upload"]])
        let name = "2026-05-10 000000 Stores.zip"
        let file = try makeFile("busy.zip", bytes: 5000)
        try await RetryingDestination(
            destination, policy: RetryPolicy(requestAttempts: 2, operationAttempts: 3, initialDelay: 0.01, maximumDelay: 0.02)
        )
        .upload(file: file, as: name, progress: nil)
        let uploads = try emulator.log().filter { $0["route"] as? String == "/2/files/upload" }
        XCTAssertEqual(uploads.map { $0["status"] as? Int }, [409, 409, 200])
        let back = work + "/busy-back.zip"
        try await destination.download(name, to: back, progress: nil)
        XCTAssertTrue(FileManager.default.contentsEqual(atPath: back, andPath: file))
    }

    func testFullAccountIsAClearError() async throws {
        try emulator.control("config", ["quota": 1000])
        do {
            try await destination().upload(file: try makeFile("a.zip", bytes: 5000), as: "2026-05-04 000000 Stores.zip", progress: nil)
            XCTFail("the upload must fail")
        } catch {
            XCTAssertTrue("\(error)".contains("out of space"), "\(error)")
            XCTAssertTrue("\(error)".contains("dropbox:///Backups"), "\(error)")
            guard case StoreBackupError.transfer(let failure) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(failure.serviceCode?.contains("insufficient_space") == true, "Dropbox's error tags: \(failure)")
        }
    }

    // MARK: tokens

    /// `auth dropbox` fed the code on stdin stores a refresh token (0600, never printed);
    /// commands then get access tokens from it, renew an expired one once, and say what
    /// to do when the refresh token is revoked.
    func testAuthCommandThenRefreshAfterExpiryThenRevokedRefreshToken() async throws {
        let auth = try runAuth()
        XCTAssertEqual(auth.status, 0, auth.stderr)
        let file = work + "/.config/storebackup/credentials"
        var info = stat()
        XCTAssertEqual(stat(file, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        let stored = try DestinationOptions.readCredentialsFile(file, required: true)
        let refreshToken = try XCTUnwrap(stored["STOREBACKUP_DROPBOX_REFRESH_TOKEN"])
        XCTAssertEqual(stored["STOREBACKUP_DROPBOX_APP_KEY"], emulator.appKey)
        XCTAssertFalse((auth.stdout + auth.stderr).contains(refreshToken))

        // No access token anywhere: the credentials file alone is enough.
        let environment = emulator.environment(home: work)
        let destination = try DropboxDestination.make(
            url: "dropbox:///Backups", options: DestinationOptions(retry: Self.retry, environment: environment))
        try await destination.upload(file: try makeFile("a.zip", bytes: 3000), as: "2026-06-01 000000 Stores.zip", progress: nil)

        try emulator.control("expire_tokens")
        let before = try emulator.log().count
        let listedAfterExpiry = try await destination.listBackups()
        XCTAssertEqual(listedAfterExpiry.count, 1)
        let afterExpiry = try requests().dropFirst(before)
        XCTAssertEqual(afterExpiry.map(\.route), ["/2/files/list_folder", "/oauth2/token", "/2/files/list_folder"])
        XCTAssertEqual(afterExpiry.map(\.status), [401, 200, 200])

        // The command line does the same from the file.
        let listed = try runStoreBackup(["list", "--to", "dropbox:///Backups"], environment: environment)
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertTrue(listed.stdout.contains("2026-06-01 000000 Stores.zip"))

        try emulator.control("revoke_refresh_token", ["refresh_token": refreshToken])
        let revoked = try runStoreBackup(["list", "--to", "dropbox:///Backups"], environment: environment)
        XCTAssertEqual(revoked.status, 1)
        XCTAssertTrue(revoked.stderr.contains("storebackup auth dropbox"), revoked.stderr)
        XCTAssertFalse(revoked.stderr.contains(refreshToken))
    }

    func testExpiredTokenWithoutRefreshTokenSaysWhatToDo() async throws {
        try emulator.control("expire_tokens")
        do {
            _ = try await destination().listBackups()
            XCTFail("an expired token must fail")
        } catch {
            XCTAssertTrue("\(error)".contains("expired"), "\(error)")
            XCTAssertEqual((error as? StoreBackupError)?.remedy, .authorizeDropbox, "\(error)")
            XCTAssertFalse("\(error)".contains("storebackup auth"), "the library names no command: \(error)")
        }
    }

    func testWrongTokenIsAClearErrorThatNeverShowsTheToken() throws {
        let token = "sl.wrong-token-\(UUID().uuidString)"
        let result = try runStoreBackup(
            ["list", "--to", "dropbox:///Backups"], environment: emulator.environment(home: work, token: token))
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("Dropbox rejected the access token"), result.stderr)
        XCTAssertTrue(result.stderr.contains("dropbox:///Backups"), result.stderr)
        XCTAssertFalse((result.stdout + result.stderr).contains(token))
        XCTAssertFalse((result.stdout + result.stderr).contains("wrong-token"))
    }

    func testNoCredentialsIsAClearError() throws {
        let result = try runStoreBackup(["list", "--to", "dropbox:///Backups"], environment: emulator.environment(home: work))
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("storebackup auth dropbox --app-key"), result.stderr)
    }

    // MARK: errors and retries

    func testTooManyRequestsIsRetriedAfterRetryAfter() async throws {
        try emulator.control("faults", ["kinds": ["429"], "routes": ["/2/files/list_folder"], "count": 2, "retry_after": 1])
        let destination = try destination(
            options: options(retry: RetryPolicy(requestAttempts: 3, operationAttempts: 1, initialDelay: 0.01, maximumDelay: 0.02)))
        let listed = try await destination.listBackups()
        XCTAssertEqual(listed.count, 0)
        let lists = try emulator.log().filter { $0["route"] as? String == "/2/files/list_folder" }
        XCTAssertEqual(lists.map { $0["status"] as? Int }, [429, 429, 409])
        // The backoff alone would be milliseconds: the waits of about a second come from Retry-After.
        let times = lists.compactMap { $0["time"] as? Double }
        XCTAssertGreaterThanOrEqual(times[1] - times[0], 0.9)
        XCTAssertGreaterThanOrEqual(times[2] - times[1], 0.9)
    }

    func testServerErrorsAndDroppedConnectionsStillGiveAnIdenticalBackup() async throws {
        var destination = try destination(
            options: options(retry: RetryPolicy(requestAttempts: 10, operationAttempts: 3, initialDelay: 0.01, maximumDelay: 0.05)))
        destination.chunkSize = 1 << 20
        let file = try makeFile("big.zip", bytes: (5 << 20) + 99)
        try emulator.control(
            "faults", ["kinds": ["500", "503", "drop", "drop_after", "truncate"], "probability": 0.3, "seed": 11, "retry_after": 0])
        let name = "2026-07-01 000000 Stores.zip"
        try await RetryingDestination(destination, policy: destination.transport.policy).upload(file: file, as: name, progress: nil)
        let back = work + "/back.zip"
        try await RetryingDestination(destination, policy: destination.transport.policy).download(name, to: back, progress: nil)
        let injected = try emulator.control("faults", method: "GET")["injected"] as? Int ?? 0
        try emulator.control("faults", [:])
        XCTAssertTrue(FileManager.default.contentsEqual(atPath: back, andPath: file))
        XCTAssertGreaterThan(injected, 0, "faults were injected")
    }

    // MARK: URLs

    func testURLsAreCheckedAndTheSchemeIsWired() throws {
        XCTAssertThrowsError(try destination("dropbox://Backups")) { error in
            XCTAssertTrue("\(error)".contains("three slashes"), "\(error)")
        }
        XCTAssertThrowsError(try destination("dropbox:///a/../b"))
        XCTAssertEqual(try destination("dropbox:///My%20Backups/nightly/").displayName, "dropbox:///My Backups/nightly")
        XCTAssertEqual(try destination("dropbox:///My%20Backups/nightly/").path(of: "x Stores.zip"), "/My Backups/nightly/x Stores.zip")
        XCTAssertEqual(try destination("dropbox:///").folderPath, "")
        let resolved = try DestinationResolver.resolve("dropbox:///Backups", options: options())
        XCTAssertEqual(resolved.displayName, "dropbox:///Backups")
        XCTAssertTrue(resolved is RetryingDestination)
        XCTAssertThrowsError(try DestinationResolver.resolve("gopher://x/y", options: options())) { error in
            XCTAssertTrue("\(error)".contains("dropbox:///PATH"), "\(error)")
        }
    }

    func testArgumentHeaderIsASCIIOnly() {
        let json = DropboxAPI.json(["path": "/Sicherungen/Grüße 🎒"])
        XCTAssertTrue(json.unicodeScalars.allSatisfy { $0.value <= 0x7E }, json)
        let decoded = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String]
        XCTAssertEqual(decoded?["path"], "/Sicherungen/Grüße 🎒")
    }

    // MARK: helpers

    /// Runs `storebackup auth dropbox`, opens the link it prints (the emulator answers
    /// with the code instead of a page), and types the code on its stdin.
    func runAuth() throws -> CommandResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestEnvironment.binary)
        process.arguments = ["auth", "dropbox", "--app-key", emulator.appKey]
        var environment = ProcessInfo.processInfo.environment
        environment.merge(emulator.environment(home: work)) { _, new in new }
        process.environment = environment
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        nonisolated(unsafe) var errorData = Data()
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            errorData = errors.fileHandleForReading.readDataToEndOfFile(); group.leave()
        }

        var printed = Data()
        while !printed.contains(UInt8(ascii: "\n")) {
            let data = output.fileHandleForReading.availableData
            if data.isEmpty { break }
            printed += data
        }
        let link = String(decoding: printed, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        XCTAssertTrue(link.contains("code_challenge_method=S256") && link.contains("token_access_type=offline"), link)
        let code = try emulator.get(link)["code"] as? String ?? ""
        input.fileHandleForWriting.write(Data((code + "\n").utf8))
        try input.fileHandleForWriting.close()
        printed += output.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        return CommandResult(
            status: process.terminationStatus, stdout: String(decoding: printed, as: UTF8.self),
            stderr: String(decoding: errorData, as: UTF8.self))
    }

    /// The official SDK, pointed at the emulator; the token goes in the environment.
    func runSDK(_ arguments: [String]) throws {
        let script = """
            import os, sys
            host = os.environ["SDK_HOST"]
            for name in ("DROPBOX_API_HOST", "DROPBOX_API_CONTENT_HOST", "DROPBOX_WEB_HOST"):
                os.environ[name] = host
            import dropbox
            dbx = dropbox.Dropbox(os.environ["SDK_TOKEN"])
            mode, source, target = sys.argv[1:4]
            if mode == "upload":
                with open(source, "rb") as f:
                    dbx.files_upload(f.read(), target, mode=dropbox.files.WriteMode.add)
            else:
                metadata = dbx.files_download_to_file(target, source)
                import hashlib
                blocks = []
                with open(target, "rb") as f:
                    while True:
                        block = f.read(4 << 20)
                        if not block: break
                        blocks.append(hashlib.sha256(block).digest())
                assert metadata.content_hash == hashlib.sha256(b"".join(blocks)).hexdigest(), "content hash"
            """
        let host = emulator.apiURL.replacingOccurrences(of: "https://", with: "")
        try runPython(
            ["-c", script] + arguments,
            environment: ["SDK_HOST": host, "SDK_TOKEN": emulator.accessToken, "REQUESTS_CA_BUNDLE": emulator.caFile])
    }

    @discardableResult
    func runPython(_ arguments: [String], environment: [String: String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3"] + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let out = Pipe(), errors = Pipe()
        process.standardOutput = out
        process.standardError = errors
        try process.run()
        nonisolated(unsafe) var errorData = Data()
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            errorData = errors.fileHandleForReading.readDataToEndOfFile(); group.leave()
        }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw NSError(
                domain: "python", code: Int(process.terminationStatus),
                userInfo: [NSLocalizedDescriptionKey: String(decoding: errorData, as: UTF8.self)])
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Dropbox's content hash by Python's hashlib, as its documentation describes it.
    static func pythonContentHash(_ file: String) throws -> String {
        let script = """
            import hashlib, sys
            blocks = []
            with open(sys.argv[1], 'rb') as f:
                while True:
                    block = f.read(4 * 1024 * 1024)
                    if not block: break
                    blocks.append(hashlib.sha256(block).digest())
            print(hashlib.sha256(b''.join(blocks)).hexdigest())
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, file]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
