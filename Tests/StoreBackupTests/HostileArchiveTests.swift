import Foundation
import XCTest

@testable import StoreBackup

/// Acceptance for issue 12: restore and verify treat every backup as hostile input.
///
/// Each archive is built by `Tests/Support/hostile_archives.py`, byte by byte, as a
/// well-formed backup with one lie in it. For every one: restore exits non-zero with one
/// `storebackup: error:` line, the live store stays byte-identical, nothing appears outside
/// the restore folder, no `<store>_New` is left, and peak RSS stays within the budget;
/// verify fails it too.
final class HostileArchiveTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }
    static let builder = TestEnvironment.packageRoot + "/Tests/Support/hostile_archives.py"
    /// The project's memory budget for create, restore and verify.
    static let budgetKiB = 64 * 1024
    /// What restore and verify may use for the 49,990-entry archive (docs/dev/scale.md).
    static let ceilingAtTheLimitsKiB = 200 * 1024

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("hostile")
        try StoreFixture.make(at: store, logRows: 100, blobCount: 2)
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/outside", withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// Every case the builder knows, restored then verified.
    func testEveryHostileArchiveIsRefused() throws {
        let built = work + "/built"
        try FileManager.default.createDirectory(atPath: built, withIntermediateDirectories: true)
        let made = try runTool("/usr/bin/env", ["python3", Self.builder, "build-all", built])
        XCTAssertEqual(made.status, 0, made.stderr)
        let cases = try FileManager.default.contentsOfDirectory(atPath: built).filter { $0.hasSuffix(".zip") }.sorted()
        // Exactly the cases the builder names, and as many as it is known to name: a case
        // that disappears, or is not built, fails here instead of going untested.
        let listed = try runTool("/usr/bin/env", ["python3", Self.builder, "list"])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let names = listed.stdout.split(separator: "\n").map(String.init).sorted()
        XCTAssertEqual(names.count, Self.caseCount, "the builder's cases changed: update caseCount with them: \(names)")
        XCTAssertEqual(cases.map { String($0.dropLast(4)) }.sorted(), names, "every case the builder names is built, and only those")
        var peak = 0
        for (number, file) in cases.enumerated() {
            let label = String(file.dropLast(4))
            let name = String(format: "2000-01-01 %06d Stores.zip", number)
            try FileManager.default.moveItem(atPath: built + "/" + file, toPath: backups + "/" + name)
            if Self.legalNow.contains(label) {
                try assertRestoresBeside(name, label: label)
            } else {
                peak = max(peak, try assertRestoreRefused(name, label: label, expecting: Self.expectedMessages[label]))
                try assertVerifyFails(name, label: label)
            }
            try FileManager.default.removeItem(atPath: backups + "/" + name)
        }
        print("hostile archives: \(cases.count) cases, peak RSS of restore \(peak) KiB")
    }

    /// How many hostile cases the builder (Tests/Support/hostile_archives.py) makes.
    static let caseCount = 48

    /// Cases that were refused before issue 32 and are legal Linux names or links that stay
    /// inside: a backslash is an ordinary character, names may hold control characters (shown
    /// escaped), and a link may point at such a name. They restore and verify.
    static let legalNow: Set<String> = [
        "slip-backslash", "slip-backslash-absolute", "name-newline", "name-c1-control", "link-control-target",
    ]

    /// A case that is legal restores (into a folder of its own, leaving the live store as it
    /// is) and verifies.
    private func assertRestoresBeside(_ name: String, label: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let target = work + "/legal-" + label
        let restored = try runStoreBackup(["restore", name, target, "--from", backups, "--yes"])
        XCTAssertEqual(restored.status, 0, "\(label): \(restored.stderr)", file: file, line: line)
        let verified = try runStoreBackup(["verify", name, "--from", backups])
        XCTAssertEqual(verified.status, 0, "\(label): \(verified.stdout)", file: file, line: line)
        try? FileManager.default.removeItem(atPath: target)
    }

    /// What each case's one error line must say (the others must only fail cleanly).
    static let expectedMessages: [String: String] = [
        "slip-dotdot": "unsafe path", "slip-nested": "unsafe path", "slip-absolute": "unsafe path",
        "slip-dot-part": "unsafe path",
        "slip-empty-part": "unsafe path", "slip-reserved-folder": "unsafe path",
        "name-nul": "NUL byte",
        // Marked UTF-8 but holding ESC: libzip finds the archive inconsistent (storebackup
        // writes such a name without the UTF-8 mark, see test RoundTripTests).
        "name-escape": "damaged", "name-not-utf8": "not in its manifest", "name-too-long": "limit",
        "link-outside": "unsafe path", "link-absolute": "unsafe path", "link-chain": "passwd -> d1/l/../../etc/passwd",
        "link-through-link": "unsafe path", "link-chain-three": "unsafe path", "link-parent-is-link": "beneath the link l",
        "file-beneath-link": "beneath the link l", "file-beneath-file": "beneath the file notes.txt", "link-loop": "unsafe path",
        "duplicate-name": "damaged", "duplicate-dir-and-file": "appears twice",
        "lying-size": "more than its declared 10 bytes", "expansion-bomb": "more than its declared 1048576 bytes",
        "sizes-disagree": "other.txt", "huge-declared-size": "must stay free",
        "overlapping-entries": "share the same bytes", "huge-manifest": "manifest is larger",
        "huge-entry-count": "10000000 entries", "huge-central-directory": "central directory",
        "million-entries": "3000000 entries but its central directory", "over-entry-ceiling": "the limit is 10000000",
        "padded-central-directory": "too large for 3 entries",
        "manifest-wrong-sha": "extra.txt does not match", "manifest-wrong-size": "extra.txt does not match",
        "manifest-missing-entry": "not in its manifest", "manifest-extra-entry": "ghost.txt is missing",
        "manifest-wrong-type": "wrong type", "manifest-duplicate-row": "twice", "manifest-ghost-database": "ghost.sqlite",
        "manifest-not-json": "manifest cannot be read", "manifest-more-rows-than-entries": "more files than the archive holds",
        "manifest-wrong-link-target": "l does not match",
        "no-manifest": "--allow-unverified",
    ]

    /// A manifest claiming 1 GiB deflate blocks is not believed: the entry is read the
    /// sequential way and memory stays within budget.
    func testHugeDeclaredBlockSizeRestoresWithinBudget() throws {
        try assertRestoresAndVerifiesWithinBudget("huge-block-size")
        XCTAssertEqual(try FileSystem.lstatInfo(store + "/big.bin").st_size, 3 << 20)
    }

    /// An archive of 49,990 entries with long names restores and verifies within the
    /// ceiling stated for it.
    func testLargestArchiveWithinLimitsStaysWithinItsCeiling() throws {
        try assertRestoresAndVerifiesWithinBudget("largest-within-limits", budgetKiB: Self.ceilingAtTheLimitsKiB)
    }

    func testArchiveOfEntriesWithinTheBudgetStaysWithin64MiB() throws {
        try assertRestoresAndVerifiesWithinBudget("within-memory-budget")
    }

    /// A backup without a manifest: refused by default, restorable with --allow-unverified
    /// (saying what was not checked); verify calls it not verifiable unless told otherwise,
    /// and then writes only its databases to disk.
    func testBackupWithoutManifestNeedsTheOptIn() throws {
        let name = "2000-01-01 000000 Stores.zip"
        try build("no-manifest", as: name)
        let verify = try runStoreBackup(["verify", name, "--from", backups])
        XCTAssertNotEqual(verify.status, 0)
        XCTAssertTrue(verify.stdout.contains("FAILED") && verify.stdout.contains("not verifiable"), verify.stdout)

        let allowed = try runStoreBackup(["verify", name, "--from", backups, "--allow-unverified"])
        XCTAssertEqual(allowed.status, 0, allowed.stdout + allowed.stderr)
        XCTAssertTrue(allowed.stdout.contains("no manifest"), allowed.stdout)

        let reader = try ArchiveReader(path: backups + "/" + name, backupName: name)
        let reading = VerifyReading(
            reader: reader, allowed: ExtractionOptions(allowUnverified: true), cancel: CancellationFlag(),
            progress: ProgressThrottle(nil))
        let scratch = work + "/scratch"
        XCTAssertEqual(try reading.read(into: scratch), ["App.sqlite"])
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: scratch), ["App.sqlite"],
            "verify writes databases only; other files are hashed as they are read")

        let restored = try runStoreBackup(["restore", name, store, "--from", backups, "--yes", "--allow-unverified"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        XCTAssertTrue(restored.stderr.contains("storebackup: warning:") && restored.stderr.contains("no manifest"), restored.stderr)
        XCTAssertEqual(try String(contentsOfFile: store + "/notes.txt", encoding: .utf8), "hello from the backup\n")
    }

    /// Restoring onto a regular file is refused and the file is left as it was.
    func testRestoreOntoARegularFileIsRefused() throws {
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        let target = work + "/plain-file"
        try "precious\n".write(toFile: target, atomically: false, encoding: .utf8)
        let before = try listing(of: work)
        let result = try runStoreBackup(["restore", "latest", target, "--from", backups, "--yes"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("is not a directory"), result.stderr)
        XCTAssertEqual(errorLines(result.stderr), 1, result.stderr)
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "precious\n")
        XCTAssertEqual(try listing(of: work), before, "nothing created, renamed or removed")
    }

    /// `create` of a store that does not exist creates nothing: no folders, no lock file.
    func testCreateOfMissingStoreCreatesNothing() throws {
        let before = try listing(of: work)
        let result = try runStoreBackup(["create", work + "/not/there/Stores", "--to", backups])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("does not exist"), result.stderr)
        XCTAssertEqual(errorLines(result.stderr), 1, result.stderr)
        XCTAssertEqual(try listing(of: work), before)
    }

    /// Keys in an s3:// URL are refused and never echoed; so is a port.
    func testS3UserInfoAndPortAreRefusedWithoutEchoingSecrets() throws {
        let withKeys = try runStoreBackup(["list", "--from", "s3://AKIDEXAMPLE:TOPSECRETKEY@bucket/prefix"])
        XCTAssertNotEqual(withKeys.status, 0)
        XCTAssertEqual(errorLines(withKeys.stderr), 1, withKeys.stderr)
        XCTAssertFalse((withKeys.stderr + withKeys.stdout).contains("TOPSECRETKEY"), withKeys.stderr)
        XCTAssertFalse((withKeys.stderr + withKeys.stdout).contains("AKIDEXAMPLE"), withKeys.stderr)
        XCTAssertTrue(withKeys.stderr.contains("s3://***@bucket/prefix"), withKeys.stderr)
        let withPort = try runStoreBackup(["list", "--from", "s3://bucket:99999999/prefix"])
        XCTAssertNotEqual(withPort.status, 0)
        XCTAssertTrue(withPort.stderr.contains("--s3-endpoint"), withPort.stderr)
    }

    /// A password "file" that is a folder gets a message saying so.
    func testPasswordFileMustBeARegularFile() throws {
        let folder = work + "/password-folder"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chmod(folder, 0o700)
        XCTAssertThrowsError(try BackupPassword(contentsOfFile: folder)) { error in
            XCTAssertTrue("\(error)".contains("not a regular file"), "\(error)")
        }
    }

    /// `latest` only picks a name that carries a date; undated ones stay listed (marked)
    /// and restorable by name.
    func testLatestIgnoresUndatedNames() async throws {
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        let dated = FileSystem.lastComponent(of: try onlyBackup(in: backups))
        let stray = "2025-13-45 999999 Stores.zip"
        try FileManager.default.copyItem(atPath: backups + "/" + dated, toPath: backups + "/" + stray)
        XCTAssertNil(BackupName.date(of: stray), "an impossible date is no date")
        let destination = LocalFolderDestination(folder: backups)
        let latest = try await destination.resolve("latest")
        XCTAssertEqual(latest.name, dated)
        let byName = try await destination.resolve(stray)
        XCTAssertEqual(byName.name, stray)
        let list = try runStoreBackup(["list", "--from", backups])
        XCTAssertTrue(list.stdout.split(separator: "\n").contains { $0.contains(stray) && $0.contains("no date in name") }, list.stdout)
    }

    /// Links are judged through the archive's other links, as the kernel resolves them.
    func testLinkTargetsAreResolvedThroughOtherLinks() throws {
        func check(_ links: [String: String], directories: [String] = []) -> Bool {
            var entries = directories.map { entry($0, .directory) }
            entries += links.keys.map { entry($0, .symlink) }
            entries.append(entry("notes.txt", .file))
            var tree = ArchiveTree(entries: entries, linkTargets: links, backupName: "test")
            return (try? tree.check()) != nil
        }
        XCTAssertTrue(check(["a": "notes.txt", "d/b": "../notes.txt"], directories: ["d"]))
        XCTAssertTrue(check(["d/up": "..", "x": "d/up/notes.txt"], directories: ["d"]), "a chain that stays inside")
        XCTAssertFalse(check(["d1/l": "..", "x": "d1/l/../../etc/passwd"], directories: ["d1"]))
        XCTAssertFalse(check(["d/b": "..", "d/a": "b/.."], directories: ["d"]))
        XCTAssertFalse(check(["a": "b", "b": "a"]), "a loop")
        XCTAssertFalse(check(["l": "d", "l/x": "y"], directories: ["d"]), "an entry beneath a link")
        let long = (0..<50).reduce(into: ["l0": "notes.txt"]) { links, index in links["l\(index + 1)"] = "l\(index)" }
        XCTAssertFalse(check(long), "more hops than the kernel follows")
    }

    private func entry(_ path: String, _ kind: ArchiveEntry.Kind) -> ArchiveEntry {
        ArchiveEntry(
            index: 0, path: path, kind: kind, permissions: 0o755, modificationTime: 0, size: 0, compressedSize: 0,
            compressionMethod: 0, crc: 0, encryptionMethod: 0)
    }

    // MARK: helpers

    /// Builds a case that must be accepted; restore and verify it, each within the budget.
    private func assertRestoresAndVerifiesWithinBudget(
        _ label: String, budgetKiB: Int = HostileArchiveTests.budgetKiB,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let name = "2000-01-01 000000 Stores.zip"
        try build(label, as: name)
        let (result, peak) = try runStoreBackupMeasuringPeakRSS(["restore", name, store, "--from", backups, "--yes"])
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        XCTAssertLessThan(peak, budgetKiB, "\(label): restore peak RSS \(peak) KiB", file: file, line: line)
        let (verified, verifyPeak) = try runStoreBackupMeasuringPeakRSS(["verify", name, "--from", backups])
        XCTAssertEqual(verified.status, 0, verified.stdout + verified.stderr, file: file, line: line)
        XCTAssertLessThan(verifyPeak, budgetKiB, "\(label): verify peak RSS \(verifyPeak) KiB", file: file, line: line)
        print("\(label): restore \(peak) KiB, verify \(verifyPeak) KiB")
    }

    private func build(_ label: String, as name: String) throws {
        let result = try runTool("/usr/bin/env", ["python3", Self.builder, "build", label, backups + "/" + name])
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    /// Restores `name`, expecting a clean refusal; returns the peak RSS in KiB.
    @discardableResult
    private func assertRestoreRefused(
        _ name: String, label: String, expecting text: String?,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> Int {
        let before = try StoreFixture.describe(store)
        let outside = try listing(of: work)
        let tmpBefore = try Set(FileManager.default.contentsOfDirectory(atPath: "/tmp").filter { $0.contains("storebackup-evil") })
        let (result, peak) = try runStoreBackupMeasuringPeakRSS(["restore", name, store, "--from", backups, "--yes"])
        XCTAssertNotEqual(result.status, 0, "\(label): restore must fail", file: file, line: line)
        XCTAssertEqual(errorLines(result.stderr), 1, "\(label): \(result.stderr)", file: file, line: line)
        let other = result.stderr.split(separator: "\n").filter { !$0.hasPrefix("storebackup: error:") && !Self.isProgress($0) }
        XCTAssertEqual(other, [], "\(label): nothing but progress and the error: \(result.stderr)", file: file, line: line)
        if let text {
            XCTAssertTrue(result.stderr.contains(text), "\(label): expected \"\(text)\" in: \(result.stderr)", file: file, line: line)
        }
        XCTAssertEqual(try StoreFixture.describe(store), before, "\(label): the live store must be byte-identical", file: file, line: line)
        XCTAssertEqual(try listing(of: work), outside, "\(label): nothing may appear outside the restore folder", file: file, line: line)
        let tmpAfter = try Set(FileManager.default.contentsOfDirectory(atPath: "/tmp").filter { $0.contains("storebackup-evil") })
        XCTAssertEqual(tmpAfter, tmpBefore, "\(label): nothing written to /tmp", file: file, line: line)
        let layout = StoreLayout(storesDirectory: store)
        for leftover in [layout.new, layout.old, layout.journal] {
            XCTAssertFalse(FileSystem.fileExists(leftover), "\(label): \(leftover) left behind", file: file, line: line)
        }
        XCTAssertLessThan(peak, Self.budgetKiB, "\(label): peak RSS \(peak) KiB", file: file, line: line)
        return peak
    }

    private func assertVerifyFails(_ name: String, label: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let (result, peak) = try runStoreBackupMeasuringPeakRSS(["verify", name, "--from", backups])
        XCTAssertNotEqual(result.status, 0, "\(label): verify must fail: \(result.stdout)", file: file, line: line)
        XCTAssertTrue(result.stdout.hasPrefix("FAILED"), "\(label): \(result.stdout) \(result.stderr)", file: file, line: line)
        XCTAssertLessThan(peak, Self.budgetKiB, "\(label): verify peak RSS \(peak) KiB", file: file, line: line)
    }

    /// The progress printer's lines (not errors).
    static func isProgress(_ line: Substring) -> Bool {
        ["storebackup: extracting", "storebackup: checking", "storebackup: downloading"].contains { line.contains($0) }
    }

    private func errorLines(_ stderr: String) -> Int {
        stderr.split(separator: "\n").filter { $0.hasPrefix("storebackup: error:") }.count
    }

    /// Every path under `root` except the live store (compared by content elsewhere), the
    /// backups, the archives waiting to be tried, and the store's lock file.
    private func listing(of root: String) throws -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        var paths: [String] = []
        let own = ["Stores/", "backups/", "built/"]
        for case let relative as String in enumerator
        where !own.contains(where: relative.hasPrefix) && relative != ".Stores.storebackup-lock" {
            paths.append(relative)
        }
        return paths.sorted()
    }
}
