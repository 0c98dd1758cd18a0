import Foundation
import Logging
import XCTest

@_spi(Testing) @testable import StoreBackup

/// Issue 47, "chains that cannot lie": every incremental that create calls good verifies and
/// restores, whatever happens around it: a file rewritten while create runs, a chain broken
/// at the destination, a clock stepped back or a burst of backups, a damaged chain state, a
/// failed check after a scheduled create.
final class ChainProofTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    var stateRoot: String { work + "/.Stores.storebackup-chains" }
    var settingsFile: String { store + "/.settings" }
    /// What an app saving its settings writes each time: the same 1,000 bytes.
    static let settings = Data(String(repeating: "theme=dark\n", count: 91).utf8.prefix(1_000))

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("chain-proof")
        try StoreFixture.make(at: store, logRows: 300, blobCount: 2)
        try Self.settings.write(to: URL(fileURLWithPath: settingsFile))
    }

    override func tearDownWithError() throws {
        TestHooks.pausePoint = nil
        try? FileManager.default.removeItem(atPath: work)
    }

    func helper(_ policy: IncrementalPolicy = IncrementalPolicy()) -> ChainedHelper {
        ChainedHelper(StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: backups)), policy: policy)
    }

    /// Verifies the named backups (their chains read from the destination); fails for each that does not pass.
    func assertVerifies(_ names: [String], file: StaticString = #filePath, line: UInt = #line) async throws {
        for name in names {
            let result = try await helper().repository.verify(.named(name))[0]
            XCTAssertTrue(result.ok, "\(name): \(result.problem ?? "")", file: file, line: line)
        }
    }

    /// Truncates the file and writes `data` into it, as `cat src > file` does.
    static func rewrite(_ path: String, with data: Data) {
        let descriptor = open(path, O_WRONLY | O_TRUNC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        _ = data.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    }

    func touchDatabase(_ note: String) throws {
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute("INSERT INTO log(note) VALUES('\(note)')", operation: "test change")
        app.close()
    }

    // MARK: finding 1: a file rewritten while create runs

    /// The scan sees the settings file while the app has just truncated it (0 bytes); by the
    /// time the change check stats it, the app has written it again. Before the fix the
    /// manifest took the size from the scan and the SHA-256 from the base: `size 0` with the
    /// hash of 1,000 bytes, an incremental that verify refused.
    func testAFileRewrittenBetweenTheScanAndTheChangeCheckIsRecordedAsOneState() async throws {
        let full = try await helper().createBackup()
        Self.rewrite(settingsFile, with: Self.settings)  // new times, same bytes: it is read next time
        let settingsFile = self.settingsFile
        TestHooks.pausePoint = { step in
            if step == "create-locked" { Self.rewrite(settingsFile, with: Data()) }
            if step == "snapshots-held" { Self.rewrite(settingsFile, with: Self.settings) }
        }
        let next = try await helper().createBackup()
        TestHooks.pausePoint = nil
        XCTAssertEqual(next.kind, "incremental")
        XCTAssertEqual(next.base, full.name)
        let row = try XCTUnwrap(next.manifest.files.first { $0.path == ".settings" })
        XCTAssertEqual(row.size, Int64(Self.settings.count), "the size of the bytes its SHA-256 describes")
        try await assertVerifies([full.name, next.name])
    }

    /// The file changes between the change check's stat and its read: first to other bytes
    /// of the same size, then to nothing. Either way it goes into the backup whole.
    func testAFileRewrittenWhileItIsHashedGoesInWhole() async throws {
        _ = try await helper().createBackup()
        let settingsFile = self.settingsFile
        for replacement in [Data(Self.settings.map { $0 == UInt8(ascii: "d") ? UInt8(ascii: "D") : $0 }), Data()] {
            Self.rewrite(settingsFile, with: Self.settings)
            TestHooks.pausePoint = { step in
                if step == "change-detector-stat" { Self.rewrite(settingsFile, with: replacement) }
            }
            let next = try await helper().createBackup()
            TestHooks.pausePoint = nil
            XCTAssertEqual(next.kind, "incremental")
            let row = try XCTUnwrap(next.manifest.files.first { $0.path == ".settings" })
            XCTAssertNil(row.source, "read while it changed: stored whole, not taken from the base")
            XCTAssertEqual(row.size, Int64(replacement.count))
            try await assertVerifies([next.name])
            let restored = work + "/restored-\(replacement.count)/Stores"
            _ = try await StoreHelper(storesDirectory: restored, destination: LocalFolderDestination(folder: backups))
                .restore(next.name)
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: restored + "/.settings")), replacement)
        }
    }

    /// The loop of the issue, in process: an app rewrites its settings file (truncate, then
    /// the same bytes) as fast as it can while incremental creates run; every backup verifies.
    /// `STOREBACKUP_CHAIN_REWRITES` sets the number of creates (default 200, at least 1).
    func testIncrementalsMadeWhileAFileIsRewrittenAllVerify() async throws {
        let rounds = try TestEnvironment.count("STOREBACKUP_CHAIN_REWRITES", default: 200, floor: 1)
        _ = try await helper().createBackup()
        let settingsFile = self.settingsFile
        var made: [String] = []
        for round in 0..<rounds {
            let stop = Locked(false)
            let rewriter = Thread {
                while !stop.withLock({ $0 }) { Self.rewrite(settingsFile, with: Self.settings) }
            }
            rewriter.start()
            let next = try await helper().createBackup()
            stop.withLock { $0 = true }
            while !rewriter.isFinished { usleep(1_000) }
            made.append(next.name)
            try await assertVerifies([next.name])
            if round % 4 == 3 { try touchDatabase("round \(round)") }
        }
        XCTAssertEqual(Set(made).count, rounds)
    }

    // MARK: finding 2: a broken chain is not extended

    func testABrokenChainIsNotExtended() async throws {
        for missing in ["middle", "full"] {
            try? FileManager.default.removeItem(atPath: backups)
            try? FileManager.default.removeItem(atPath: stateRoot)
            var chain: [String] = []
            for night in 0..<3 {
                try touchDatabase("\(missing) night \(night)")
                chain.append(try await helper().createBackup().name)
            }
            XCTAssertTrue(BackupName.isIncremental(chain[2]))
            let removed = missing == "middle" ? chain[1] : chain[0]
            try FileManager.default.removeItem(atPath: backups + "/" + removed)
            try touchDatabase("\(missing) after the loss")
            let next = try await helper().createBackup()
            XCTAssertEqual(next.kind, "full", missing)
            XCTAssertTrue(next.fullReason?.contains("broken") == true, "\(next.fullReason ?? "no reason")")
            try await assertVerifies([next.name])
            let extended = try await helper().createBackup()
            XCTAssertEqual(extended.base, next.name, "the new chain goes on from the full")
            try await assertVerifies([extended.name])
        }
    }

    /// With a mirror, a chain broken at the mirror alone makes a full too (the archive is
    /// built once, so it is an incremental only where every destination holds the whole chain).
    func testAChainBrokenAtAMirrorIsNotExtended() async throws {
        let mirror = work + "/mirror"
        var names: [String] = []
        for night in 0..<3 {
            try touchDatabase("mirrored night \(night)")
            let outcomes = try await helper().createBackup(alsoTo: [LocalFolderDestination(folder: mirror)])
            XCTAssertTrue(outcomes.allSatisfy(\.succeeded), "\(outcomes.map(\.error))")
            names.append(try XCTUnwrap(outcomes[1].backup?.name))
        }
        try FileManager.default.removeItem(atPath: mirror + "/" + names[1])
        try touchDatabase("mirrored after the loss")
        let outcomes = try await helper().createBackup(alsoTo: [LocalFolderDestination(folder: mirror)])
        let first = try XCTUnwrap(outcomes[0].backup)
        XCTAssertEqual(first.kind, "full")
        XCTAssertTrue(first.fullReason?.contains(mirror) == true, "\(first.fullReason ?? "no reason")")
    }

    // MARK: finding 3: names never go back, never collide

    /// A burst of creates within one second of the clock, then the clock stepped back by 30
    /// minutes (followed) and by two hours (not followed: a new chain with a full): every
    /// name is unique, every incremental named after its base, and everything verifies.
    func testNamesNeverGoBackAndNeverCollide() async throws {
        let start = Date(timeIntervalSince1970: 1_800_000_000.25)
        let clock = Locked(start)
        func make() async throws -> BackupResult {
            var helper = helper(IncrementalPolicy(maxChainLength: 6))
            helper.helper.now = { clock.withLock { $0 } }
            return try await helper.createBackup()
        }
        var made: [BackupResult] = []
        for _ in 0..<8 { made.append(try await make()) }
        clock.withLock { $0 = start.addingTimeInterval(-1_800) }
        for _ in 0..<2 { made.append(try await make()) }
        XCTAssertEqual(made.map(\.name), made.map(\.name).sorted(), "names in the order they were made")
        clock.withLock { $0 = start.addingTimeInterval(-7_200) }
        let stepped = try await make()
        XCTAssertEqual(stepped.kind, "full")
        XCTAssertTrue(stepped.fullReason?.contains("ahead of this machine's clock") == true, "\(stepped.fullReason ?? "")")
        XCTAssertTrue(stepped.warnings.contains { $0.contains("ahead of this machine's clock") }, "\(stepped.warnings)")
        let after = try await make()
        XCTAssertEqual(after.base, stepped.name)
        made += [stepped, after]
        XCTAssertEqual(Set(made.map(\.name)).count, made.count, "no name taken twice")
        for backup in made {
            guard let base = backup.base else { continue }
            XCTAssertLessThan(BackupName.date(of: base)!, BackupName.date(of: backup.name)!, backup.name)
        }
        let chains = BackupChains(try await LocalFolderDestination(folder: backups).listBackups())
        for backup in made {
            XCTAssertFalse(chains.isBroken(backup.name), backup.name)
            XCTAssertEqual(chains.base(of: backup.name), backup.base, backup.name)
        }
        let results = try await helper().repository.verify(.all)
        XCTAssertEqual(results.count, made.count)
        XCTAssertTrue(results.allSatisfy(\.ok), "\(results.filter { !$0.ok })")
    }

    // MARK: finding 4: the chain state is checked

    /// One changed hex digit in any file of the state, or a missing manifest copy: the next
    /// backup is a full, with the reason, and it verifies.
    func testADamagedChainStateMakesAFull() async throws {
        let damages: [(String, (String) throws -> Void)] = [
            ("state.json", { folder in try Self.flipHexDigit(in: folder + "/state.json", after: "\"manifestSHA256\"") }),
            ("files", { folder in try Self.flipHexDigit(in: try Self.stateFile(folder, prefix: "files-"), after: "\t", last: true) }),
            ("manifest", { folder in try Self.flipHexDigit(in: try Self.stateFile(folder, prefix: "manifest-"), after: "\"sha256\"") }),
            ("map", { folder in try Self.flipByte(in: try Self.stateFile(folder, prefix: "map-"), at: 40) }),
            ("no manifest", { folder in try FileManager.default.removeItem(atPath: try Self.stateFile(folder, prefix: "manifest-")) }),
        ]
        for (what, damage) in damages {
            try touchDatabase("before \(what)")
            _ = try await helper().createBackup()
            let folder = stateRoot + "/" + (try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: stateRoot).first))
            try damage(folder)
            try touchDatabase("after \(what)")
            let next = try await helper().createBackup()
            XCTAssertEqual(next.kind, "full", what)
            XCTAssertNotNil(next.fullReason, what)
            try await assertVerifies([next.name])
        }
    }

    static func stateFile(_ folder: String, prefix: String) throws -> String {
        let name = try FileManager.default.contentsOfDirectory(atPath: folder).first { $0.hasPrefix(prefix) }
        return folder + "/" + (try XCTUnwrap(name, "no \(prefix) file in \(folder)"))
    }

    /// Changes the first hex digit after `marker` (the last occurrence with `last`).
    static func flipHexDigit(in path: String, after marker: String, last: Bool = false) throws {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let text = String(decoding: bytes, as: UTF8.self)
        let range = try XCTUnwrap(last ? text.range(of: marker, options: .backwards) : text.range(of: marker))
        var index = text.utf8.distance(from: text.utf8.startIndex, to: range.upperBound)
        while index < bytes.count, !(Character(UnicodeScalar(bytes[index])).isHexDigit && bytes[index] != UInt8(ascii: "\"")) {
            index += 1
        }
        bytes[index] = bytes[index] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    static func flipByte(in path: String, at offset: Int) throws {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes[min(offset, bytes.count - 1)] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    // MARK: finding 5: a scheduled run recovers by itself

    /// The backup a scheduled run made is damaged before its check: the run fails, the chain
    /// state is dropped, and the next run makes a full that verifies.
    func testAScheduledRunWhoseCheckFailsStartsANewChain() async throws {
        var job = StoreJob(name: "app", storesDirectory: store, destination: backups, schedule: .daily(hour: 2, minute: 30))
        job.incremental = IncrementalPolicy()
        let service = BackupService(jobs: [job], stateStore: BackupStateStore(directory: work + "/state"), logger: Logger(label: "test"))
        let first = try await service.backUpNow("app")
        XCTAssertNil(first.error)
        try touchDatabase("night 2")
        let backups = self.backups
        TestHooks.pausePoint = { step in
            guard step == "chain-published",
                let newest = try? FileManager.default.contentsOfDirectory(atPath: backups).filter({ $0.contains("incremental") }).max()
            else { return }
            // A bit flipped in the middle of the archive, as a bad disk would.
            let path = backups + "/" + newest
            if let size = try? FileSystem.lstatInfo(path).st_size { try? Self.flipByte(in: path, at: Int(size / 2)) }
        }
        do {
            _ = try await service.backUpNow("app")
            XCTFail("the damaged backup passed its check")
        } catch StoreBackupError.verificationFailed(let backup, _) {
            XCTAssertTrue(BackupName.isIncremental(backup), backup)
        }
        TestHooks.pausePoint = nil
        XCTAssertFalse(FileSystem.fileExists(stateRoot + "/" + ChainFolder.key(for: backups)), "the chain state is dropped")
        try touchDatabase("night 3")
        let recovered = try await service.backUpNow("app")
        XCTAssertNil(recovered.error)
        XCTAssertEqual(recovered.backup?.kind, "full", "not built on the damaged one")
        let fourth = try await service.backUpNow("app")
        XCTAssertEqual(fourth.backup?.base, recovered.backup?.name)
    }
}
