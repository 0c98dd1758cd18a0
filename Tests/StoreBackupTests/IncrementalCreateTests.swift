import Foundation
import Logging
import MetricsTestKit
import XCTest

@testable import StoreBackup

/// The create side of incremental backups (issue 35, docs/FORMAT.md format 3): a first
/// backup in a chain is a format-3 full with complete page maps; the next holds only the
/// changed pages and files; any doubt about the chain state or the base gives a full.
final class IncrementalCreateTests: XCTestCase {
    static let password = "incremental p4ssword"
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var stateRoot: String { work + "/.Stores.storebackup-chains" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("incremental-create")
        try StoreFixture.make(at: store, logRows: 6_000)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    func helper(policy: IncrementalPolicy = IncrementalPolicy(), encrypted: Bool = false) throws -> ChainedHelper {
        let helper = StoreHelper(
            storesDirectory: store, destination: LocalFolderDestination(folder: backups),
            passwords: encrypted ? .fixed(try BackupPassword(Self.password)) : nil)
        return ChainedHelper(helper, policy: policy, encrypt: encrypted)
    }

    /// What python's zipfile sees in an archive: names, whether each is encrypted, the
    /// manifest (unencrypted archives), the SHA-256 of its bytes, and each page delta's
    /// header, as JSON.
    func inspect(_ archive: String) throws -> [String: Any] {
        let script = """
            import hashlib, json, struct, sys, zipfile
            z = zipfile.ZipFile(sys.argv[1])
            out = {"names": [i.filename for i in z.infolist()],
                   "encrypted": {i.filename: bool(i.flag_bits & 1) for i in z.infolist()}, "deltas": {}, "maps": {}}
            if not any(out["encrypted"].values()):
                raw = z.read(".storebackup/manifest.json")
                out["manifest"] = json.loads(raw)
                out["manifestSHA256"] = hashlib.sha256(raw).hexdigest()
                for name in out["names"]:
                    data = z.read(name)
                    if name.startswith(".storebackup/pages/"):
                        magic, version, page_size, pages, records = struct.unpack("<4sB3xIII", data[:20])
                        out["deltas"][name[len(".storebackup/pages/"):]] = {
                            "magic": magic.decode(), "pageSize": page_size, "pages": pages, "records": records}
                    if name.startswith(".storebackup/pagemap/"):
                        out["maps"][name[len(".storebackup/pagemap/"):]] = {
                            "magic": data[:4].decode(), "kind": data[5], "hash": data[6], "size": len(data)}
            print(json.dumps(out))
            """
        let result = try runTool("/usr/bin/python3", ["-c", script, archive])
        XCTAssertEqual(result.status, 0, result.stderr)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    /// Applies an incremental's page delta for `database` onto the base's copy of it (both
    /// read with python's zipfile) and returns the SHA-256 of the result.
    func patchedSHA256(base: String, incremental: String, database: String) throws -> String {
        let script = """
            import hashlib, struct, sys, zipfile
            db = bytearray(zipfile.ZipFile(sys.argv[1]).read(sys.argv[3]))
            delta = zipfile.ZipFile(sys.argv[2]).read(".storebackup/pages/" + sys.argv[3])
            magic, version, page_size, pages, records = struct.unpack("<4sB3xIII", delta[:20])
            assert magic == b"SBPD" and version == 1
            at = 20
            for _ in range(records):
                (page,) = struct.unpack("<I", delta[at:at + 4])
                db[(page - 1) * page_size:page * page_size] = delta[at + 4:at + 4 + page_size]
                at += 4 + page_size
            assert at == len(delta)
            del db[pages * page_size:]
            print(hashlib.sha256(db).hexdigest())
            """
        let result = try runTool("/usr/bin/python3", ["-c", script, base, incremental, database])
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func file(_ manifest: [String: Any], _ path: String) -> [String: Any]? {
        (manifest["files"] as? [[String: Any]])?.first { $0["path"] as? String == path }
    }

    func addBlob(_ name: String, bytes: Int) {
        let data = Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) })
        XCTAssertTrue(FileManager.default.createFile(atPath: store + "/.App_SUPPORT/_EXTERNAL_DATA/" + name, contents: data))
    }

    func testFullThenIncrementalHoldsOnlyTheChanges() async throws {
        let first = try await helper().createBackup()
        XCTAssertEqual(first.kind, "full")
        XCTAssertNil(first.base)
        XCTAssertFalse(BackupName.isIncremental(first.name))
        let full = try inspect(backups + "/" + first.name)
        let fullNames = try XCTUnwrap(full["names"] as? [String])
        let fullManifest = try XCTUnwrap(full["manifest"] as? [String: Any])
        // Format 3, or 4 when an entry is deflated in blocks (their hashes need format 4).
        let blocked = (fullManifest["files"] as? [[String: Any]] ?? []).contains { ($0["deflateBlocks"] as? [Int] ?? []).count > 1 }
        XCTAssertTrue(fullNames.contains(".storebackup/format-\(blocked ? 4 : 3)"), "\(fullNames)")
        XCTAssertFalse(fullNames.contains(".storebackup/format-2"))
        XCTAssertEqual(fullManifest["format"] as? Int, blocked ? 4 : 3)
        XCTAssertEqual(fullManifest["kind"] as? String, "full")
        XCTAssertEqual(fullManifest["chainLength"] as? Int, 0)
        XCTAssertNil(fullManifest["hashSalt"])
        let maps = try XCTUnwrap(full["maps"] as? [String: [String: Any]])
        let appPages = try XCTUnwrap(
            (fullManifest["databases"] as? [[String: Any]])?.first { $0["path"] as? String == "App.sqlite" }?["pageCount"] as? Int)
        XCTAssertGreaterThan(appPages, 100)
        XCTAssertEqual(maps["App.sqlite"]?["kind"] as? Int, 0)
        XCTAssertEqual(maps["App.sqlite"]?["hash"] as? Int, 1)
        XCTAssertEqual(maps["App.sqlite"]?["size"] as? Int, 16 + 16 * appPages, "a complete map: one hash per page")
        XCTAssertNotNil(maps["Settings.sqlite"])
        XCTAssertEqual(
            (fullManifest["pageMaps"] as? [[String: Any]])?.map { $0["complete"] as? Bool }, [true, true])

        // A day's work: a few rows updated, one blob added.
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute("UPDATE accounts SET balance = balance + 7 WHERE id IN (1, 2, 3)", operation: "update")
        app.close()
        addBlob("new-blob", bytes: 50_000)

        let second = try await helper().createBackup()
        XCTAssertEqual(second.kind, "incremental")
        XCTAssertEqual(second.base, first.name)
        XCTAssertTrue(second.name.contains(" incremental on "), second.name)
        XCTAssertEqual(BackupName.base(of: second.name, among: [first.name, second.name]), first.name)
        let incremental = try inspect(backups + "/" + second.name)
        let names = try XCTUnwrap(incremental["names"] as? [String])
        let manifest = try XCTUnwrap(incremental["manifest"] as? [String: Any])
        XCTAssertEqual(manifest["format"] as? Int, 3)
        XCTAssertEqual(manifest["kind"] as? String, "incremental")
        XCTAssertEqual(manifest["chainLength"] as? Int, 1)
        let base = try XCTUnwrap(manifest["base"] as? [String: Any])
        XCTAssertEqual(base["name"] as? String, first.name)
        XCTAssertEqual(base["manifestSHA256"] as? String, full["manifestSHA256"] as? String)
        XCTAssertEqual(base["createdAt"] as? String, fullManifest["createdAt"] as? String)

        // Only the changed pages.
        let deltas = try XCTUnwrap(incremental["deltas"] as? [String: [String: Any]])
        let appDelta = try XCTUnwrap(deltas["App.sqlite"])
        XCTAssertEqual(appDelta["magic"] as? String, "SBPD")
        let records = try XCTUnwrap(appDelta["records"] as? Int)
        XCTAssertGreaterThan(records, 0)
        XCTAssertLessThan(records, 10, "three rows of one table change a handful of pages, not \(appPages)")
        XCTAssertFalse(names.contains("App.sqlite"), "the database is patched, not stored whole")
        XCTAssertEqual(file(manifest, "App.sqlite")?["source"] as? String, "pages")
        XCTAssertEqual(
            try patchedSHA256(base: backups + "/" + first.name, incremental: backups + "/" + second.name, database: "App.sqlite"),
            file(manifest, "App.sqlite")?["sha256"] as? String, "base + delta gives the snapshot the manifest lists")
        XCTAssertEqual((deltas["Settings.sqlite"]?["records"] as? Int), 0, "an unchanged database has no changed pages")
        let changedMaps = try XCTUnwrap(incremental["maps"] as? [String: [String: Any]])
        XCTAssertEqual(changedMaps["App.sqlite"]?["kind"] as? Int, 1)
        XCTAssertEqual(changedMaps["App.sqlite"]?["size"] as? Int, 16 + 20 * records)

        // The new blob is in it; unchanged files are the base's.
        XCTAssertTrue(names.contains(".App_SUPPORT/_EXTERNAL_DATA/new-blob"), "\(names)")
        XCTAssertNil(file(manifest, ".App_SUPPORT/_EXTERNAL_DATA/new-blob")?["source"])
        XCTAssertFalse(names.contains("notes.txt"))
        XCTAssertEqual(file(manifest, "notes.txt")?["source"] as? String, "base")
        XCTAssertEqual(file(manifest, "notes.txt")?["sha256"] as? String, file(fullManifest, "notes.txt")?["sha256"] as? String)
        XCTAssertEqual(
            (manifest["files"] as? [[String: Any]])?.count, (fullManifest["files"] as? [[String: Any]])!.count + 1,
            "the manifest lists the complete tree")
        XCTAssertTrue(names.contains("Caches/Empty/"), "folders are always entries")
        XCTAssertTrue(names.contains("notes-link"), "links are always entries")
        let fullSize = try XCTUnwrap(FileSystem.lstatInfo(backups + "/" + first.name).st_size)
        XCTAssertLessThan(second.size * 4, Int64(fullSize), "the incremental is far smaller than the full")

        // A file whose stat changed but whose content did not stays the base's.
        StoreFixture.setModificationTime(store + "/notes.txt", 1_600_000_999)
        let third = try await helper().createBackup()
        XCTAssertEqual(third.base, second.name)
        let thirdManifest = try XCTUnwrap(try inspect(backups + "/" + third.name)["manifest"] as? [String: Any])
        XCTAssertEqual(file(thirdManifest, "notes.txt")?["source"] as? String, "base")
        XCTAssertEqual(file(thirdManifest, "notes.txt")?["mtime"] as? Int, 1_600_000_999)
        XCTAssertEqual(thirdManifest["chainLength"] as? Int, 2)
    }

    func testChangedContentWithTheSameStatSizeIsDetected() async throws {
        _ = try await helper().createBackup()
        let path = store + "/notes.txt"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("grocery LIST\n".utf8)))
        let next = try await helper().createBackup()
        XCTAssertEqual(next.kind, "incremental")
        let names = try XCTUnwrap(try inspect(backups + "/" + next.name)["names"] as? [String])
        XCTAssertTrue(names.contains("notes.txt"), "a rewritten file (new ctime and mtime) is read and stored")
    }

    func testAnyDoubtAboutTheChainGivesAFull() async throws {
        let first = try await helper().createBackup()
        let key = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: stateRoot).first)
        let folder = stateRoot + "/" + key
        let mode = try FileSystem.lstatInfo(folder).st_mode & 0o777
        XCTAssertEqual(mode, 0o700)
        XCTAssertEqual(try FileSystem.lstatInfo(folder + "/state.json").st_mode & 0o777, 0o600)

        // A corrupt state.
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: folder + "/state.json"))
        let afterCorrupt = try await helper().createBackup()
        XCTAssertEqual(afterCorrupt.kind, "full")

        // A missing state.
        try FileManager.default.removeItem(atPath: stateRoot)
        let afterMissing = try await helper().createBackup()
        XCTAssertEqual(afterMissing.kind, "full")

        // A damaged page map.
        let mapName = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: folder).first { $0.hasPrefix("map-") })
        truncate(folder + "/" + mapName, 20)
        let afterMap = try await helper().createBackup()
        XCTAssertEqual(afterMap.kind, "full")

        // The base gone from the destination.
        let chained = try await helper().createBackup()
        XCTAssertEqual(chained.kind, "incremental")
        try FileManager.default.removeItem(atPath: backups + "/" + chained.name)
        let afterBaseGone = try await helper().createBackup()
        XCTAssertEqual(afterBaseGone.kind, "full")

        // The policy: forced, chain length, delta share.
        let forced = try await helper(policy: IncrementalPolicy(forceFull: true)).createBackup()
        XCTAssertEqual(forced.kind, "full")
        let noChain = try await helper(policy: IncrementalPolicy(maxChainLength: 0)).createBackup()
        XCTAssertEqual(noChain.kind, "full")
        addBlob("big-change", bytes: 200_000)
        let tooBig = try await helper(policy: IncrementalPolicy(maxDeltaShare: 0.01)).createBackup()
        XCTAssertEqual(tooBig.kind, "full", "a change over the share makes a full")
        let names = try XCTUnwrap(try inspect(backups + "/" + tooBig.name)["names"] as? [String])
        XCTAssertTrue(names.contains("App.sqlite") && names.contains("notes.txt"), "a full holds everything")
        XCTAssertTrue(names.contains(".storebackup/pagemap/App.sqlite"))
        let then = try await helper().createBackup()
        XCTAssertEqual(then.base, tooBig.name, "the full starts the next chain")
        XCTAssertNotEqual(first.name, then.name)
    }

    func testPlainCreateMakesNoChain() async throws {
        let plain = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups))
        let result = try await plain.createBackup()
        // Format 2, or 4 when an entry is deflated in blocks (their hashes need format 4).
        let blocked = result.manifest.files.contains { ($0.deflateBlocks?.count ?? 0) > 1 }
        XCTAssertEqual(result.manifest.format, blocked ? 4 : 2)
        XCTAssertNil(result.manifest.kind)
        let names = try XCTUnwrap(try inspect(backups + "/" + result.name)["names"] as? [String])
        XCTAssertTrue(names.contains(".storebackup/format-\(blocked ? 4 : 2)"), "\(names)")
        XCTAssertFalse(names.contains { $0.hasPrefix(".storebackup/pagemap/") })
        XCTAssertFalse(FileSystem.fileExists(stateRoot), "plain create keeps no chain state")
    }

    func testEncryptedChainUsesKeyedHashes() async throws {
        let first = try await helper(encrypted: true).createBackup()
        XCTAssertEqual(first.kind, "full")
        XCTAssertEqual(first.manifest.hashSalt?.count, 32)
        XCTAssertEqual(first.manifest.pageMaps?.first?.hash, "hmac-sha256-128")
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute("UPDATE accounts SET balance = balance - 1 WHERE id = 5", operation: "update")
        app.close()
        let second = try await helper(encrypted: true).createBackup()
        XCTAssertEqual(second.kind, "incremental")
        XCTAssertEqual(second.manifest.hashSalt, first.manifest.hashSalt, "incrementals carry the chain's salt")
        let seen = try inspect(backups + "/" + second.name)
        let encrypted = try XCTUnwrap(seen["encrypted"] as? [String: Bool])
        XCTAssertEqual(encrypted[".storebackup/pagemap/App.sqlite"], true)
        XCTAssertEqual(encrypted[".storebackup/pages/App.sqlite"], true)

        // The map's hash kind, read with the password (7-Zip).
        let extracted = work + "/x"
        let sevenZip = try runTool(
            "/usr/bin/7z", ["x", "-p" + Self.password, "-o" + extracted, backups + "/" + second.name, ".storebackup/pagemap/App.sqlite"])
        XCTAssertEqual(sevenZip.status, 0, sevenZip.stdout + sevenZip.stderr)
        let map = try Data(contentsOf: URL(fileURLWithPath: extracted + "/.storebackup/pagemap/App.sqlite"))
        XCTAssertEqual(Array(map.prefix(7)), Array("SBPM".utf8) + [1, 1, 2], "a changed-pages map of keyed hashes")

        // Another password, or no encryption, starts a new chain.
        var other = try helper(encrypted: true)
        other.helper.passwords = .fixed(try BackupPassword("another password"))
        let renewed = try await other.createBackup()
        XCTAssertEqual(renewed.kind, "full")
        XCTAssertNotEqual(renewed.manifest.hashSalt, first.manifest.hashSalt)
        let unencrypted = try await helper().createBackup()
        XCTAssertEqual(unencrypted.kind, "full")
        XCTAssertNil(unencrypted.manifest.hashSalt)
    }

    func testDatabasesWithANewPageSizeAddedOrRemoved() async throws {
        _ = try await helper().createBackup()
        // Settings.sqlite gets a new page size (VACUUM rewrites it), a database is added.
        let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
        try settings.execute("PRAGMA page_size = 8192; VACUUM;", operation: "page size")
        settings.close()
        let added = try SQLiteConnection(path: store + "/Added.sqlite", mode: .create)
        try added.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1);", operation: "add")
        added.close()
        let second = try await helper().createBackup()
        XCTAssertEqual(second.kind, "incremental")
        let seen = try inspect(backups + "/" + second.name)
        let names = try XCTUnwrap(seen["names"] as? [String])
        let manifest = try XCTUnwrap(seen["manifest"] as? [String: Any])
        XCTAssertTrue(names.contains("Settings.sqlite"), "a new page size: stored whole")
        XCTAssertTrue(names.contains("Added.sqlite"), "a new database: stored whole")
        XCTAssertNil(file(manifest, "Settings.sqlite")?["source"])
        XCTAssertNil(file(manifest, "Added.sqlite")?["source"])
        XCTAssertEqual(file(manifest, "App.sqlite")?["source"] as? String, "pages")
        let maps = try XCTUnwrap(seen["maps"] as? [String: [String: Any]])
        XCTAssertEqual(maps["Added.sqlite"]?["kind"] as? Int, 0, "a database stored whole has a complete map")
        let pageMaps = try XCTUnwrap(manifest["pageMaps"] as? [[String: Any]])
        XCTAssertEqual(pageMaps.first { $0["path"] as? String == "Added.sqlite" }?["complete"] as? Bool, true)

        // Removed: the next incremental no longer lists it.
        try FileManager.default.removeItem(atPath: store + "/Added.sqlite")
        let third = try await helper().createBackup()
        XCTAssertEqual(third.kind, "incremental")
        let thirdManifest = try XCTUnwrap(try inspect(backups + "/" + third.name)["manifest"] as? [String: Any])
        XCTAssertNil(file(thirdManifest, "Added.sqlite"))
        XCTAssertEqual(file(thirdManifest, "Settings.sqlite")?["source"] as? String, "pages")
    }

    func testCommandLineIncrementalJSON() throws {
        let first = try runStoreBackup(["create", store, "--to", backups, "--incremental", "--json"])
        XCTAssertEqual(first.status, 0, first.stderr)
        let full = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(full["kind"] as? String, "full")
        XCTAssertNil(full["base"])
        addBlob("cli-blob", bytes: 10_000)
        let second = try runStoreBackup(["create", store, "--to", backups, "--incremental", "--json"])
        XCTAssertEqual(second.status, 0, second.stderr)
        let incremental = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(second.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(incremental["kind"] as? String, "incremental")
        XCTAssertEqual(incremental["base"] as? String, full["name"] as? String)
        let forced = try runStoreBackup(["create", store, "--to", backups, "--incremental", "--full", "--json"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertTrue(forced.stdout.contains("\"kind\":\"full\""), forced.stdout)
        let plain = try runStoreBackup(["create", store, "--to", backups, "--json"])
        XCTAssertTrue(plain.stdout.contains("\"kind\":\"full\""), plain.stdout)
        let misuse = try runStoreBackup(["create", store, "--to", backups, "--full"])
        XCTAssertNotEqual(misuse.status, 0)
        XCTAssertTrue(misuse.stderr.contains("--incremental"), misuse.stderr)
        let help = try runStoreBackup(["create", "--help"])
        XCTAssertTrue(help.stdout.contains("incremental on"), help.stdout)
    }

    func testMirrorsGetAnIncrementalOnlyWhenEveryOneHoldsTheBase() async throws {
        let other = work + "/mirror"
        var helper = try helper()
        let mirror = LocalFolderDestination(folder: other)
        let first = try await helper.createBackup(alsoTo: [mirror])
        XCTAssertEqual(first.compactMap(\.backup).map(\.kind), ["full", "full"])
        addBlob("mirrored-blob", bytes: 20_000)
        let second = try await helper.createBackup(alsoTo: [mirror])
        let published = second.compactMap(\.backup)
        XCTAssertEqual(published.map(\.kind), ["incremental", "incremental"])
        XCTAssertEqual(published.map(\.base), [first[0].backup?.name, first[1].backup?.name])
        XCTAssertTrue(FileSystem.fileExists(other + "/" + published[1].name))

        // The mirror loses the base: both get a full, and each destination's state names
        // the backup as published there.
        try FileManager.default.removeItem(atPath: other + "/" + published[1].name)
        let third = try await helper.createBackup(alsoTo: [mirror])
        let fulls = third.compactMap(\.backup)
        XCTAssertEqual(fulls.map(\.kind), ["full", "full"])
        for (destination, backup) in zip([LocalFolderDestination(folder: backups), mirror], fulls) {
            guard case .state(let state, _) = ChainFolder(storesDirectory: store, destination: destination.displayName).load() else {
                return XCTFail("no chain state for \(destination.displayName)")
            }
            XCTAssertEqual(state.backupName, backup.name)
            XCTAssertEqual(state.archiveSize, backup.size)
            XCTAssertEqual(state.chainLength, 0)
        }
        helper.options.incremental = IncrementalPolicy(forceFull: true)
        let forced = try await helper.createBackup(alsoTo: [mirror])
        XCTAssertEqual(forced.compactMap(\.backup).map(\.kind), ["full", "full"])
    }

    func testUploadedBytesAreCountedByKind() async throws {
        let metrics = ExportedMetricsTests.metrics
        let destination = LocalFolderDestination(folder: backups)
        let place = [("store", store), ("destination", destination.displayName)]
        let full = try await helper().createBackup()
        addBlob("counted", bytes: 5_000)
        let incremental = try await helper().createBackup()
        XCTAssertEqual(
            try metrics.expectCounter(BackupMetrics.uploadedBytesByKind, place + [("kind", "full")]).totalValue, full.size)
        XCTAssertEqual(
            try metrics.expectCounter(BackupMetrics.uploadedBytesByKind, place + [("kind", "incremental")]).totalValue,
            incremental.size)
        XCTAssertEqual(try metrics.expectCounter(BackupMetrics.uploadedBytes, place).totalValue, full.size + incremental.size)
    }

    func testConfigurationAndTheScheduledRunMakeIncrementals() async throws {
        let configuration = try BackupConfiguration.parse(
            yaml: """
                schedule: daily 02:30
                destination: \(backups)
                incremental: true
                max-chain: 3
                stores:
                  - {name: app, path: \(store), full-every: 2d, max-delta-share: 0.25, verify-after-create: false}
                  - {name: plain, path: /srv/plain, incremental: false}
                """, file: "/etc/test.yml", environment: [:])
        XCTAssertEqual(
            configuration.stores[0].incremental, IncrementalPolicy(fullEvery: 2 * 86_400, maxChainLength: 3, maxDeltaShare: 0.25))
        XCTAssertNil(configuration.stores[1].incremental)
        for (bad, key) in [
            ("max-chain: 1.5", "stores[0].max-chain"), ("max-chain: -1", "stores[0].max-chain"),
            ("max-delta-share: 2", "stores[0].max-delta-share"), ("full-every: soon", "stores[0].full-every"),
        ] {
            XCTAssertThrowsError(
                try BackupConfiguration.parse(
                    yaml: "schedule: every 1h\nstores:\n  - {name: a, path: /a, incremental: true, \(bad)}", file: "/etc/t.yml",
                    environment: [:])
            ) { error in
                guard case StoreBackupError.invalidConfiguration(let problem) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(problem.key, key, bad)
            }
        }
        XCTAssertThrowsError(
            try BackupConfiguration.parse(
                yaml: "schedule: every 1h\nstores:\n  - {name: a, path: /a, max-chain: 3}", file: "/etc/t.yml", environment: [:]),
            "a policy key without incremental: true does nothing, so it is an error")

        // Two nights: each run its own service, as two `run` or `create --store` processes.
        func night() async throws -> BackupRunOutcome {
            let service = BackupService(
                jobs: [configuration.stores[0]], stateStore: BackupStateStore(directory: work + "/state"), logger: Logger(label: "test"))
            return try await service.backUpNow("app")
        }
        let first = try await night()
        XCTAssertEqual(first.backup?.kind, "full")
        addBlob("nightly", bytes: 5_000)
        let second = try await night()
        XCTAssertEqual(second.backup?.kind, "incremental")
        XCTAssertEqual(second.backup?.base, first.backup?.name)
    }

    /// kill -9 after the scan (deltas and new maps written, nothing published) and after the
    /// publish (before the state is saved): the state is the previous one, the dead run's
    /// temporaries go, and the next run is an incremental on a base that is really there.
    func testKillDuringAnIncrementalCreate() throws {
        let first = try runStoreBackup(["create", store, "--to", backups, "--incremental", "--json"])
        XCTAssertEqual(first.status, 0, first.stderr)
        let full = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any])
        let key = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: stateRoot).first)
        let folder = stateRoot + "/" + key
        let savedState = try Data(contentsOf: URL(fileURLWithPath: folder + "/state.json"))

        addBlob("before-kill", bytes: 30_000)
        let scanned = try BackgroundCommand(
            ["create", store, "--to", backups, "--incremental"], environment: ["STOREBACKUP_TEST_PAUSE_AT": "chain-scanned"])
        XCTAssertTrue(scanned.waitForLine(containing: "test pause at chain-scanned"))
        XCTAssertTrue(
            try FileManager.default.contentsOfDirectory(atPath: folder).contains { $0.hasPrefix(".storebackup-tmp-") },
            "the new page maps are being written in the state folder")
        scanned.kill9()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/state.json")), savedState)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backups).filter(BackupName.isBackup).count, 1)

        let published = try BackgroundCommand(
            ["create", store, "--to", backups, "--incremental"], environment: ["STOREBACKUP_TEST_PAUSE_AT": "chain-published"])
        XCTAssertTrue(published.waitForLine(containing: "test pause at chain-published"))
        published.kill9()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/state.json")), savedState, "saved only after publish")
        let names = try FileManager.default.contentsOfDirectory(atPath: backups).filter(BackupName.isBackup)
        XCTAssertEqual(names.count, 2, "the killed run had published: \(names)")

        let next = try runStoreBackup(["create", store, "--to", backups, "--incremental", "--json"])
        XCTAssertEqual(next.status, 0, next.stderr)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(next.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(result["kind"] as? String, "incremental")
        XCTAssertEqual(result["base"] as? String, full["name"] as? String, "on the last backup the state knows")
        let manifest = try XCTUnwrap(try inspect(backups + "/" + (result["name"] as! String))["manifest"] as? [String: Any])
        let base = try inspect(backups + "/" + (full["name"] as! String))
        XCTAssertEqual((manifest["base"] as? [String: Any])?["manifestSHA256"] as? String, base["manifestSHA256"] as? String)
        XCTAssertFalse(
            try FileManager.default.contentsOfDirectory(atPath: folder).contains { $0.hasPrefix(".storebackup-tmp-") },
            "the killed runs' temporaries are swept")
        XCTAssertNotEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/state.json")), savedState)
    }

    /// A database in the store's own `.storebackup` folder: its delta and map are named after
    /// its entry name (`.storebackup/store/...`), and a store file named like a delta stays a
    /// store file.
    func testDeltasOfADatabaseInTheStoresOwnReservedFolder() async throws {
        try FileManager.default.createDirectory(atPath: store + "/.storebackup/pages", withIntermediateDirectories: true)
        let inner = try SQLiteConnection(path: store + "/.storebackup/Inner.sqlite", mode: .create)
        try inner.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1);", operation: "inner")
        inner.close()
        XCTAssertTrue(FileManager.default.createFile(atPath: store + "/.storebackup/pages/App.sqlite", contents: Data("a file".utf8)))
        _ = try await helper().createBackup()
        let again = try SQLiteConnection(path: store + "/.storebackup/Inner.sqlite", mode: .readWrite)
        try again.execute("INSERT INTO t VALUES (2);", operation: "inner")
        again.close()
        let next = try await helper().createBackup()
        XCTAssertEqual(next.kind, "incremental")
        let seen = try inspect(backups + "/" + next.name)
        let names = try XCTUnwrap(seen["names"] as? [String])
        let deltas = try XCTUnwrap(seen["deltas"] as? [String: [String: Any]])
        XCTAssertGreaterThan(deltas[".storebackup/store/.storebackup/Inner.sqlite"]?["records"] as? Int ?? 0, 0, "\(names)")
        XCTAssertTrue(names.contains(".storebackup/pagemap/.storebackup/store/.storebackup/Inner.sqlite"), "\(names)")
        let manifest = try XCTUnwrap(seen["manifest"] as? [String: Any])
        XCTAssertEqual(file(manifest, ".storebackup/Inner.sqlite")?["source"] as? String, "pages")
        XCTAssertEqual(file(manifest, ".storebackup/pages/App.sqlite")?["source"] as? String, "base")
        XCTAssertEqual(file(manifest, ".storebackup/pages/App.sqlite")?["type"] as? String, "file")
    }

    /// Rebuilds the newest backup of a chain from its archives (python's zipfile: an
    /// independent reader of FORMAT.md format 3) and compares it with the live store:
    /// every regular file byte for byte, every database by integrity_check and its rows,
    /// every file's bytes against the newest manifest's SHA-256. Prints problems, one a line.
    static let chainCheck = """
        import hashlib, json, sqlite3, struct, sys, zipfile, os
        store, out, archives = sys.argv[1], sys.argv[2], sys.argv[3:]
        tree, problems = {}, []
        for number, archive in enumerate(archives):
            z = zipfile.ZipFile(archive)
            manifest = json.loads(z.read(".storebackup/manifest.json"))
            if number > 0:
                base = json.loads(zipfile.ZipFile(archives[number - 1]).read(".storebackup/manifest.json"))
                raw = zipfile.ZipFile(archives[number - 1]).read(".storebackup/manifest.json")
                if manifest["base"]["manifestSHA256"] != hashlib.sha256(raw).hexdigest():
                    problems.append(f"{archive}: base manifest hash")
            new = {}
            for f in manifest["files"]:
                if f["type"] not in ("file", "database"):
                    continue
                source = f.get("source")
                if source is None:
                    data = z.read(f["path"])
                elif source == "base":
                    data = tree[f["path"]]
                else:
                    data = bytearray(tree[f["path"]])
                    delta = z.read(".storebackup/pages/" + f["path"])
                    _, _, size, pages, records = struct.unpack("<4sB3xIII", delta[:20])
                    at = 20
                    for _ in range(records):
                        (page,) = struct.unpack("<I", delta[at:at + 4])
                        data[(page - 1) * size:page * size] = delta[at + 4:at + 4 + size]
                        at += 4 + size
                    del data[pages * size:]
                    data = bytes(data)
                if hashlib.sha256(data).hexdigest() != f["sha256"]:
                    problems.append(f"{archive}: {f['path']} does not match its sha256 ({source})")
                new[f["path"]] = data
            tree = new
        live = set()
        for folder, _, names in os.walk(store):
            for name in names:
                path = os.path.relpath(os.path.join(folder, name), store)
                if not path.endswith(("-wal", "-shm", "-journal")) and not os.path.islink(os.path.join(store, path)):
                    live.add(path)
        if live != set(tree):
            problems.append(f"files differ: only live {sorted(live - set(tree))}, only backup {sorted(set(tree) - live)}")
        for path, data in tree.items():
            if path not in live:
                continue
            if data[:16] == b"SQLite format 3\\0":
                rebuilt = os.path.join(out, path.replace("/", "_"))
                open(rebuilt, "wb").write(data)
                def rows(p):
                    c = sqlite3.connect(p)
                    ok = c.execute("PRAGMA integrity_check").fetchone()[0]
                    tables = [t for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
                    content = {t: c.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}
                    c.close()
                    return ok, content
                ok, content = rows(rebuilt)
                if ok != "ok":
                    problems.append(f"{path}: integrity_check {ok}")
                if content != rows(os.path.join(store, path))[1]:
                    problems.append(f"{path}: rows differ from the live database")
            elif data != open(os.path.join(store, path), "rb").read():
                problems.append(f"{path}: bytes differ from the live file")
        print("\\n".join(problems))
        """

    /// Seeded nights of work (updates, inserts, deletes, VACUUM, a page-size change, blobs
    /// added, changed and removed), an incremental after each: rebuilding the newest backup
    /// from its chain gives the store as it was. STOREBACKUP_INCREMENTAL_NIGHTS sets how many
    /// nights (default 6, at least 2).
    func testSeededNightsRebuildFromTheChain() async throws {
        let nights = try TestEnvironment.count("STOREBACKUP_INCREMENTAL_NIGHTS", default: 6, floor: 2)
        var random = SplitMix64(seed: 3_535)
        // Every night an incremental, however much changed: this is about what they hold.
        let policy = IncrementalPolicy(maxDeltaShare: 1)
        var chain = [try await helper(policy: policy).createBackup().name]
        let blobs = store + "/.App_SUPPORT/_EXTERNAL_DATA/"
        for night in 1...nights {
            let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
            try app.execute("BEGIN", operation: "night")
            for _ in 0..<40 {
                let id = Int(random.next() % 1_000) + 1
                try app.execute("UPDATE accounts SET balance = balance + \(Int(random.next() % 100)) WHERE id = \(id)", operation: "u")
            }
            try app.execute("INSERT INTO log(note) SELECT 'night \(night) ' || id FROM log LIMIT 300", operation: "i")
            try app.execute("DELETE FROM log WHERE id % \(7 + night) = 0", operation: "d")
            try app.execute("COMMIT", operation: "night")
            if night % 3 == 0 { try app.execute("VACUUM", operation: "vacuum") }
            app.close()
            if night == 2 {
                let settings = try SQLiteConnection(path: store + "/Settings.sqlite", mode: .readWrite)
                try settings.execute("PRAGMA page_size = 16384; VACUUM; INSERT INTO kv VALUES('n', '2');", operation: "page size")
                settings.close()
            }
            addBlob("night-\(night)", bytes: Int(random.next() % 60_000) + 1)
            let existing = try FileManager.default.contentsOfDirectory(atPath: blobs).sorted()
            if night % 2 == 0, let victim = existing.first { try FileManager.default.removeItem(atPath: blobs + victim) }
            if let changed = existing.last {
                let handle = try XCTUnwrap(FileHandle(forWritingAtPath: blobs + changed))
                handle.seekToEndOfFile()
                handle.write(Data("changed on night \(night)".utf8))
                try handle.close()
            }
            let backup = try await helper(policy: policy).createBackup()
            XCTAssertEqual(backup.kind, "incremental", "night \(night)")
            XCTAssertEqual(backup.base, chain.last)
            chain.append(backup.name)
            let out = work + "/rebuilt-\(night)"
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let result = try runTool(
                "/usr/bin/python3", ["-c", Self.chainCheck, store, out] + chain.map { backups + "/" + $0 })
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "", "night \(night)")
        }
    }

    /// `full-every`: a chain whose full is older than the policy's period gets a full.
    func testAFullOnceTheChainsFullIsOlderThanFullEvery() async throws {
        _ = try await helper().createBackup()
        addBlob("a", bytes: 1_000)
        let kept = try await helper().createBackup()
        XCTAssertEqual(kept.kind, "incremental")
        // Eight days on, by the helper's clock.
        let eightDaysOn = Date().addingTimeInterval(8 * 86_400)
        addBlob("b", bytes: 1_000)
        var nineDays = try helper(policy: IncrementalPolicy(fullEvery: 9 * 86_400))
        nineDays.helper.now = { eightDaysOn }
        let longer = try await nineDays.createBackup()
        XCTAssertEqual(longer.kind, "incremental", "within a 9-day period")
        addBlob("c", bytes: 1_000)
        var sevenDays = try helper()
        sevenDays.helper.now = { eightDaysOn.addingTimeInterval(60) }
        let renewed = try await sevenDays.createBackup()
        XCTAssertEqual(renewed.kind, "full", "the chain's full is 8 days old; the default is 7")
    }

    /// Over the delta share in an encrypted chain: the full starts a new chain with a new
    /// salt (its maps hashed again under the new key), and the next incremental builds on it.
    func testAnEncryptedChainOverTheDeltaShareStartsAgainWithANewSalt() async throws {
        let first = try await helper(encrypted: true).createBackup()
        addBlob("big", bytes: 300_000)
        let over = try await helper(policy: IncrementalPolicy(maxDeltaShare: 0.01), encrypted: true).createBackup()
        XCTAssertEqual(over.kind, "full")
        let salt = try XCTUnwrap(over.manifest.hashSalt)
        XCTAssertNotEqual(salt, first.manifest.hashSalt)
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute("UPDATE accounts SET balance = 0 WHERE id = 9", operation: "update")
        app.close()
        let next = try await helper(encrypted: true).createBackup()
        XCTAssertEqual(next.kind, "incremental")
        XCTAssertEqual(next.base, over.name)
        XCTAssertEqual(next.manifest.hashSalt, salt)
        let delta = try XCTUnwrap(next.manifest.files.first { $0.path == "App.sqlite" })
        XCTAssertEqual(delta.source, "pages", "the new chain's maps match the new key: only changed pages")
        let stored = try XCTUnwrap(try inspect(backups + "/" + next.name)["names"] as? [String])
        XCTAssertFalse(stored.contains("App.sqlite"))
    }

    func testCommandLineMirroredIncrementalJSON() throws {
        let arguments = ["create", store, "--to", backups, "--to", work + "/mirror", "--incremental", "--json"]
        let first = try runStoreBackup(arguments)
        XCTAssertEqual(first.status, 0, first.stderr)
        let full = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(full["kind"] as? String, "full")
        addBlob("mirrored", bytes: 8_000)
        let second = try runStoreBackup(arguments)
        XCTAssertEqual(second.status, 0, second.stderr)
        let incremental = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(second.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(incremental["kind"] as? String, "incremental")
        XCTAssertEqual(incremental["base"] as? String, full["name"] as? String)
        XCTAssertEqual(
            (incremental["destinations"] as? [[String: Any]])?.compactMap { $0["status"] as? String }, ["published", "published"])
    }
}
