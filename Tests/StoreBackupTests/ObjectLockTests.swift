import Foundation
import XCTest

@testable import StoreBackup

/// Issue 36, point 3: immutable backups with S3 Object Lock, against moto (rclone's S3
/// server does not implement Object Lock). The server is the oracle: each backup's
/// retention is read back from a signed HEAD's `x-amz-object-lock-*` headers (moto 5.2
/// does not implement GetObjectRetention), and versions with GET ?versions.
final class ObjectLockTests: XCTestCase {
    var servers: TestServers!
    var moto: [String: Any] = [:]
    var work = ""
    var store = ""

    var endpoint: String { moto["endpoint"] as! String }
    var environment: [String: String] {
        [
            "AWS_ACCESS_KEY_ID": moto["access_key"] as! String, "AWS_SECRET_ACCESS_KEY": moto["secret_key"] as! String,
            "AWS_REGION": "us-east-1", "HOME": work,
        ]
    }

    override func setUpWithError() throws {
        servers = try TestServers(label: "objectlock")
        moto = try servers.start("moto")
        work = try TestEnvironment.temporaryDirectory("objectlock")
        store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 200, blobCount: 2)
    }

    override func tearDownWithError() throws {
        servers?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    func to(_ bucket: String) -> [String] { ["--to", "s3://\(bucket)/app", "--s3-endpoint", endpoint] }

    func testLockIsSetOnAMultipartBackupAndDeleteIsRefused() throws {
        try makeBucket("locked", objectLock: true)
        // Large enough for a multipart upload: the lock goes on CreateMultipartUpload.
        try shell("head -c 35651584 /dev/urandom > '\(store)/.App_SUPPORT/video.bin'")
        let created = try runStoreBackup(["create", store, "--retain-days", "3"] + to("locked"), environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        let retention = try lock(of: "/locked/app/\(encode(name))")
        XCTAssertEqual(retention.mode, "GOVERNANCE")
        let until = try XCTUnwrap(retention.until.flatMap(HTTPDates.iso8601), "\(retention)")
        XCTAssertGreaterThan(until, Date().addingTimeInterval(2.9 * 86_400))
        XCTAssertLessThan(until, Date().addingTimeInterval(3.1 * 86_400))

        let deleted = try runStoreBackup(["delete", name, "--yes"] + to("locked"), environment: environment)
        XCTAssertNotEqual(deleted.status, 0)
        XCTAssertTrue(deleted.stderr.contains("is locked until"), deleted.stderr)
        XCTAssertTrue(deleted.stderr.contains("S3 Object Lock"), deleted.stderr)
        let listed = try runStoreBackup(["list"] + to("locked"), environment: environment)
        XCTAssertTrue(listed.stdout.contains(name), "a refused delete leaves the backup listed: \(listed.stdout)")
        XCTAssertEqual(try versions(bucket: "locked").filter { $0.contains(name) }.count, 1, "no delete marker was added")
    }

    func testComplianceModeAndPruneKeepsLockedBackupsAndSaysUntilWhen() throws {
        try makeBucket("locked", objectLock: true)
        var names: [String] = []
        for _ in 0..<2 {
            let created = try runStoreBackup(
                ["create", store, "--retain-days", "1", "--retain-mode", "compliance"] + to("locked"),
                environment: environment)
            XCTAssertEqual(created.status, 0, created.stderr)
            names.append(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        XCTAssertEqual(try lock(of: "/locked/app/\(encode(names[0]))").mode, "COMPLIANCE")

        let pruned = try runStoreBackup(["prune", "--keep-last", "1", "--yes"] + to("locked"), environment: environment)
        XCTAssertEqual(pruned.status, 0, "a locked backup is kept, not an error: \(pruned.stderr)")
        XCTAssertTrue(pruned.stderr.contains("kept \(names[0])"), pruned.stderr)
        XCTAssertTrue(pruned.stderr.contains("locked until"), pruned.stderr)
        let listed = try runStoreBackup(["list"] + to("locked"), environment: environment)
        for name in names { XCTAssertTrue(listed.stdout.contains(name), listed.stdout) }
    }

    func testPreflightRefusesABucketWithoutObjectLock() throws {
        let created = try runStoreBackup(["create", store, "--retain-days", "1"] + to(moto["bucket"] as! String), environment: environment)
        XCTAssertNotEqual(created.status, 0)
        XCTAssertTrue(created.stderr.contains("does not have S3 Object Lock enabled"), created.stderr)
        XCTAssertEqual(try versions(bucket: moto["bucket"] as! String), [], "nothing was uploaded")
    }

    func testOtherDestinationsSayTheyCannotLock() throws {
        let created = try runStoreBackup(["create", store, "--retain-days", "1", "--to", work + "/folder"], environment: environment)
        XCTAssertNotEqual(created.status, 0)
        XCTAssertTrue(created.stderr.contains("a local folder cannot lock backups; Object Lock needs S3"), created.stderr)
    }

    /// On a versioned bucket, delete removes the version itself: no delete marker hides
    /// bytes that stay.
    func testDeleteOnAVersionedBucketRemovesTheBytes() throws {
        try makeVersionedBucket("versioned")
        let created = try runStoreBackup(["create", store] + to("versioned"), environment: environment)
        XCTAssertEqual(created.status, 0, created.stderr)
        let name = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try versions(bucket: "versioned").count, 1)
        let deleted = try runStoreBackup(["delete", name, "--yes"] + to("versioned"), environment: environment)
        XCTAssertEqual(deleted.status, 0, deleted.stderr)
        XCTAssertEqual(try versions(bucket: "versioned"), [], "no version and no delete marker is left")
        let listed = try runStoreBackup(["list", "--json"] + to("versioned"), environment: environment)
        XCTAssertFalse(listed.stdout.contains(name), listed.stdout)
    }

    /// Prune on a versioned bucket deletes each version one by one, not by key in a batch
    /// (which would leave the bytes behind delete markers).
    func testPruneOnAVersionedBucketRemovesTheBytesOfEveryBackup() throws {
        try makeVersionedBucket("versioned")
        var names: [String] = []
        for _ in 0..<3 {
            let created = try runStoreBackup(["create", store] + to("versioned"), environment: environment)
            XCTAssertEqual(created.status, 0, created.stderr)
            names.append(created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        XCTAssertEqual(Set(names).count, 3, "\(names)")
        let pruned = try runStoreBackup(["prune", "--keep-last", "1", "--yes"] + to("versioned"), environment: environment)
        XCTAssertEqual(pruned.status, 0, pruned.stderr)
        XCTAssertEqual(try versions(bucket: "versioned"), ["Version app/\(names[2])"], "no delete marker, no old version")
    }

    // MARK: the server's own refusal (issue 54)

    /// The lock is the server's, not only storebackup's: a signed DELETE of the locked
    /// version itself (with its version id, no bypass header) is refused with 403
    /// AccessDenied, and the version stays.
    func testServerRefusesToDeleteALockedVersion() async throws {
        try makeBucket("locked", objectLock: true)
        let name = try await uploadLockedBackup()
        let version = try XCTUnwrap(versionIDs(bucket: "locked")["app/" + name], "the upload has a version")
        let answer = try raw("DELETE", "/locked/app/\(encode(name))?versionId=\(encode(version))")
        XCTAssertEqual(answer.status, 403, answer.body)
        XCTAssertTrue(answer.body.contains("AccessDenied"), answer.body)
        XCTAssertEqual(try versions(bucket: "locked"), ["Version app/\(name)"], "the locked version stays")
    }

    /// A lock the HEAD does not show (here a proxy strips the `x-amz-object-lock-*` headers
    /// of every HEAD answer, as a gateway or a missing permission to read retention would):
    /// storebackup sends the versioned DELETE, the server refuses it with 403, and the
    /// refusal is reported as the backup being locked. The backup stays.
    func testALockTheHeadDoesNotShowIsReportedLockedFromTheServersRefusal() async throws {
        try makeBucket("locked", objectLock: true)
        let name = try await uploadLockedBackup()
        let plan = work + "/strip-lock-headers.json"
        let rules: [[String: Any]] = [["method": "HEAD", "fault": "strip_headers", "headers": ["x-amz-object-lock-"]]]
        try JSONSerialization.data(withJSONObject: ["rules": rules]).write(to: URL(fileURLWithPath: plan))
        let proxy = try servers.start("proxy", arguments: ["--upstream", "127.0.0.1:\(moto["port"] as! Int)", "--plan", plan])
        // No --retain-days: the client knows nothing of the lock but what the server says.
        let throughProxy = "http://127.0.0.1:\(proxy["port"] as! Int)"
        let destination = try DestinationResolver.resolve(
            "s3://locked/app", options: DestinationOptions(retry: .fastForTests, s3Endpoint: throughProxy, environment: environment))
        do {
            try await BackupRepository(destination: destination).delete(name)
            XCTFail("deleted a locked backup")
        } catch let error as StoreBackupError {
            guard case .backupLocked(let locked, _, let until) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(locked, name)
            XCTAssertNil(until, "the HEAD showed no date")
            XCTAssertTrue(error.description.contains("is locked"), error.description)
        }
        XCTAssertEqual(try versions(bucket: "locked"), ["Version app/\(name)"], "the locked version stays, no delete marker")
        // The HEAD's lock headers were stripped, and the DELETE reached the server, which refused it.
        let log = try String(contentsOfFile: proxy["log"] as! String, encoding: .utf8).split(separator: "\n").compactMap {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let heads = log.filter { ($0["request"] as? String)?.hasPrefix("HEAD ") == true }
        XCTAssertFalse(heads.isEmpty, "\(log)")
        for head in heads {
            XCTAssertTrue((head["fault"] as? String)?.contains("x-amz-object-lock-retain-until-date") == true, "\(head)")
        }
        let deletes = log.filter { ($0["request"] as? String)?.hasPrefix("DELETE ") == true }
        XCTAssertEqual(deletes.map { $0["status"] as? Int }, [403], "\(log)")
        XCTAssertTrue((deletes.first?["request"] as? String)?.contains("versionId=") == true, "\(deletes)")
    }

    /// A small backup uploaded with a one-day governance lock; returns its name.
    func uploadLockedBackup() async throws -> String {
        let file = work + "/locked.zip"
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: file))
        let name = BackupName.make(for: Date(timeIntervalSince1970: 1_790_000_000))
        try await s3("locked", days: 1).upload(file: file, as: name, progress: nil)
        XCTAssertNotNil(try lock(of: "/locked/app/\(encode(name))").until, "the upload is locked")
        return name
    }

    /// Key to version id of every version in `bucket` (ListObjectVersions).
    func versionIDs(bucket: String) throws -> [String: String] {
        let answer = try raw("GET", "/\(bucket)?versions")
        XCTAssertEqual(answer.status, 200, answer.body)
        var found: [String: String] = [:]
        for piece in answer.body.components(separatedBy: "<Version>").dropFirst() {
            if let key = value("Key", in: piece), let version = value("VersionId", in: piece) { found[key] = version }
        }
        return found
    }

    // MARK: chains (issue 35): a base stays locked as long as its dependents

    func s3(_ bucket: String, days: Int, mode: ObjectLockRetention.Mode = .governance) throws -> any BackupDestination {
        var options = DestinationOptions(retry: .fastForTests, s3Endpoint: endpoint, environment: environment)
        options.objectLock = ObjectLockRetention(days: days, mode: mode)
        return try DestinationResolver.resolve("s3://\(bucket)/app", options: options)
    }

    func until(_ name: String, bucket: String = "locked") throws -> Date {
        let retention = try lock(of: "/\(bucket)/app/\(encode(name))")
        return try XCTUnwrap(retention.until.flatMap(HTTPDates.iso8601), "\(name): \(retention)")
    }

    func testAnIncrementalExtendsTheLockOfItsWholeChain() async throws {
        try makeBucket("locked", objectLock: true)
        let file = work + "/bytes.zip"
        try Data(repeating: 9, count: 1000).write(to: URL(fileURLWithPath: file))
        let full = BackupName.make(for: Date(timeIntervalSince1970: 1_790_000_000))
        let middle = BackupName.makeIncremental(for: Date(timeIntervalSince1970: 1_790_086_400), base: full)!
        let top = BackupName.makeIncremental(for: Date(timeIntervalSince1970: 1_790_172_800), base: middle)!
        let other = BackupName.make(for: Date(timeIntervalSince1970: 1_789_000_000))
        try await s3("locked", days: 1).upload(file: file, as: other, progress: nil)
        try await s3("locked", days: 1).upload(file: file, as: full, progress: nil)
        let threeDays = try s3("locked", days: 3)
        try await threeDays.upload(file: file, as: middle, progress: nil)
        XCTAssertLessThan(try until(full), Date().addingTimeInterval(1.1 * 86_400), "before: the base's own day")

        let extended = try await threeDays.extendChainRetention(of: middle)
        XCTAssertEqual(extended, [full])
        XCTAssertGreaterThanOrEqual(try until(full), try until(middle))
        XCTAssertLessThan(try until(other), Date().addingTimeInterval(1.1 * 86_400), "a backup outside the chain is untouched")
        let again = try await threeDays.extendChainRetention(of: middle)
        XCTAssertEqual(again, [], "a lock already long enough is left alone")
        let fullAlone = try await threeDays.extendChainRetention(of: full)
        XCTAssertEqual(fullAlone, [], "a full has no chain below it")

        // A longer, compliance-mode incremental on top: both bases follow, each in its own mode.
        let fiveDays = try s3("locked", days: 5, mode: .compliance)
        try await fiveDays.upload(file: file, as: top, progress: nil)
        let both = try await fiveDays.extendChainRetention(of: top)
        XCTAssertEqual(both, [full, middle])
        let topUntil = try until(top)
        XCTAssertGreaterThan(topUntil, Date().addingTimeInterval(4.9 * 86_400))
        for base in [full, middle] {
            XCTAssertGreaterThanOrEqual(try until(base), topUntil, base)
            XCTAssertEqual(try lock(of: "/locked/app/\(encode(base))").mode, "GOVERNANCE", "extending keeps the mode")
        }
    }

    /// Copying a chain to a locked bucket: the base goes first and ends locked at least as
    /// long as the incremental that arrived after it; a base already there with a shorter
    /// lock is extended.
    func testCopyingAChainLocksTheBaseAsLongAsItsIncremental() async throws {
        try makeBucket("locked", objectLock: true)
        let source = work + "/source"
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        let full = BackupName.make(for: Date(timeIntervalSince1970: 1_790_000_000))
        let incremental = BackupName.makeIncremental(for: Date(timeIntervalSince1970: 1_790_086_400), base: full)!
        for name in [full, incremental] {
            try Data(repeating: 3, count: 500).write(to: URL(fileURLWithPath: source + "/" + name))
        }
        let copier = BackupCopier(from: LocalFolderDestination(folder: source), to: try s3("locked", days: 2))
        let outcomes = try await copier.copyChain(incremental)
        XCTAssertEqual(outcomes.map(\.name), [full, incremental])
        XCTAssertEqual(outcomes.map(\.status), [.copied, .copied], "\(outcomes)")
        XCTAssertGreaterThanOrEqual(try until(full), try until(incremental))

        // The same chain into another bucket whose base is there already, locked for one
        // day only: copying the incremental extends it.
        try makeBucket("second", objectLock: true)
        try await s3("second", days: 1).upload(file: source + "/" + full, as: full, progress: nil)
        XCTAssertLessThan(try until(full, bucket: "second"), Date().addingTimeInterval(1.1 * 86_400))
        let other = BackupCopier(from: LocalFolderDestination(folder: source), to: try s3("second", days: 3))
        let second = try await other.copyChain(incremental)
        XCTAssertEqual(second.map(\.name), [incremental], "the base was there: only the incremental is listed")
        XCTAssertEqual(second.map(\.status), [.copied], "\(second)")
        XCTAssertGreaterThan(try until(full, bucket: "second"), Date().addingTimeInterval(2.9 * 86_400))
        XCTAssertGreaterThanOrEqual(try until(full, bucket: "second"), try until(incremental, bucket: "second"))
    }

    // MARK: the server side

    func makeBucket(_ name: String, objectLock: Bool) throws {
        let answer = try raw("PUT", "/" + name, headers: objectLock ? ["x-amz-bucket-object-lock-enabled: true"] : [])
        XCTAssertEqual(answer.status, 200, answer.body)
    }

    /// A bucket with versioning on and no Object Lock.
    func makeVersionedBucket(_ name: String) throws {
        try makeBucket(name, objectLock: false)
        let versioning = work + "/versioning.xml"
        try Data("<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>".utf8).write(
            to: URL(fileURLWithPath: versioning))
        XCTAssertEqual(try raw("PUT", "/\(name)?versioning", headers: ["Content-Type: application/xml"], bodyFile: versioning).status, 200)
    }

    /// Every version and delete marker in `bucket` (ListObjectVersions), as "KIND KEY".
    func versions(bucket: String) throws -> [String] {
        let answer = try raw("GET", "/\(bucket)?versions")
        XCTAssertEqual(answer.status, 200, answer.body)
        var found: [String] = []
        for kind in ["Version", "DeleteMarker"] {
            for piece in answer.body.components(separatedBy: "<\(kind)>").dropFirst() {
                found.append(kind + " " + (value("Key", in: piece) ?? "?"))
            }
        }
        return found
    }

    /// The lock a signed HEAD reports on the object at `path`: mode and retain-until date.
    func lock(of path: String) throws -> (mode: String?, until: String?) {
        let answer = try raw("HEAD", path, extra: ["-I"])
        XCTAssertEqual(answer.status, 200, answer.body)
        var headers: [String: String] = [:]
        for line in answer.body.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return (headers["x-amz-object-lock-mode"], headers["x-amz-object-lock-retain-until-date"])
    }

    /// curl with a SigV4 signature (moto hides locked objects' headers from anonymous requests).
    func raw(
        _ method: String, _ path: String, headers: [String] = [], bodyFile: String? = nil,
        extra: [String] = []
    ) throws -> (status: Int, body: String) {
        var arguments =
            [
                "-sS", "-K", "-", "--aws-sigv4", "aws:amz:us-east-1:s3", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "-w", "\n%{http_code}",
            ] + extra
        if method != "HEAD" { arguments += ["-X", method] }
        for header in headers { arguments += ["-H", header] }
        if let bodyFile { arguments += ["--data-binary", "@" + bodyFile] }
        arguments.append(endpoint + path)
        let result = try runTool(
            "/usr/bin/curl", arguments, stdin: "user = \"\(environment["AWS_ACCESS_KEY_ID"]!):\(environment["AWS_SECRET_ACCESS_KEY"]!)\"\n")
        guard let newline = result.stdout.lastIndex(of: "\n") else { return (0, result.stdout + result.stderr) }
        return (Int(result.stdout[result.stdout.index(after: newline)...]) ?? 0, String(result.stdout[..<newline]))
    }

    func value(_ tag: String, in xml: String) -> String? {
        guard let start = xml.range(of: "<\(tag)>"), let end = xml.range(of: "</\(tag)>", range: start.upperBound..<xml.endIndex) else {
            return nil
        }
        return String(xml[start.upperBound..<end.lowerBound])
    }

    func encode(_ name: String) -> String {
        name.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? name
    }

    private func shell(_ command: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
    }
}
