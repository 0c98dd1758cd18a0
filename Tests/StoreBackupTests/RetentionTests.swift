import Foundation
import XCTest

@testable import StoreBackup

/// Retention decisions on synthetic dated backups: restic's documented examples, and the
/// same decisions as the real `restic forget` on the same snapshot dates.
final class RetentionTests: XCTestCase {
    var utc: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    func listing(_ date: Date) -> BackupListing {
        BackupListing(name: BackupName.make(for: date), size: 1, date: date, modified: date)
    }

    func kept(_ decisions: [RetentionPolicy.Decision]) -> [String] { decisions.filter(\.keep).map(\.backup.name) }

    /// restic's docs: daily backups with --keep-daily 7 --keep-weekly 5 --keep-monthly 12
    /// --keep-yearly 75 keep the 7 newest days, then 4 more week ends (the dailies already hold
    /// one week), the month ends, and one per year.
    func testDocumentedDailyWeeklyMonthlyYearlyExample() throws {
        // Daily at 10:00 UTC from 2024-01-01 to Sunday 2026-03-15.
        let start = utc.date(from: DateComponents(year: 2024, month: 1, day: 1, hour: 10))!
        let end = utc.date(from: DateComponents(year: 2026, month: 3, day: 15, hour: 10))!
        var backups: [BackupListing] = []
        var day = start
        while day <= end { backups.append(listing(day)); day = utc.date(byAdding: .day, value: 1, to: day)! }
        let policy = RetentionPolicy(keepDaily: 7, keepWeekly: 5, keepMonthly: 12, keepYearly: 75)
        let decisions = policy.apply(to: backups, calendar: utc)
        let byReason = { (reason: String) in decisions.filter { $0.reasons.contains(reason) } }
        XCTAssertEqual(byReason("daily snapshot").count, 7)
        XCTAssertEqual(byReason("weekly snapshot").count, 5)
        XCTAssertEqual(
            byReason("weekly snapshot").filter { !$0.reasons.contains("daily snapshot") }.count, 4,
            "the 7 dailies already include one week's end")
        XCTAssertEqual(byReason("monthly snapshot").count, 12)
        XCTAssertEqual(byReason("yearly snapshot").count, 3, "only three years have backups")
        // Every weekly keeper is a Sunday (the ISO week's last day), every monthly one a month's last day.
        for decision in byReason("weekly snapshot") {
            XCTAssertEqual(utc.component(.weekday, from: decision.backup.date), 1)
        }
        for decision in byReason("monthly snapshot").dropFirst() {
            let nextDay = utc.date(byAdding: .day, value: 1, to: decision.backup.date)!
            XCTAssertEqual(utc.component(.day, from: nextDay), 1, decision.backup.name)
        }
        XCTAssertEqual(decisions.first?.backup.date, end)
        XCTAssertTrue(decisions.first!.keep)
    }

    /// restic's docs: --keep-within 2y5m7d3h keeps everything made in the two years, five months,
    /// seven days and three hours before the newest backup (not before now).
    func testKeepWithinIsRelativeToTheNewestBackup() throws {
        let newest = utc.date(from: DateComponents(year: 2020, month: 6, day: 30, hour: 12))!
        let limit = utc.date(from: DateComponents(year: 2018, month: 1, day: 23, hour: 9))!  // newest − 2y5m7d3h
        let dates = [
            newest, limit.addingTimeInterval(60), limit, limit.addingTimeInterval(-60),
            utc.date(from: DateComponents(year: 2010, month: 1, day: 1))!,
        ]
        let policy = RetentionPolicy(keepWithin: try RetentionSpan.parse("2y5m7d3h"))
        let decisions = policy.apply(to: dates.map(listing), calendar: utc)
        XCTAssertEqual(kept(decisions), [newest, limit.addingTimeInterval(60)].map { BackupName.make(for: $0) })
        XCTAssertEqual(decisions[0].reasons, ["within 2y5m7d3h"])
    }

    func testKeepLastAndTheNewestIsNeverDeleted() {
        let base = utc.date(from: DateComponents(year: 2026, month: 3, day: 1))!
        let backups = (0..<5).map { listing(base.addingTimeInterval(TimeInterval($0) * 3600)) }
        let lastTwo = RetentionPolicy(keepLast: 2).apply(to: backups, calendar: utc)
        XCTAssertEqual(kept(lastTwo), [backups[4].name, backups[3].name])
        XCTAssertEqual(lastTwo.filter { !$0.keep }.count, 3)
        // A rule that keeps nothing recent (a span of 1h but only one backup in it) still keeps the newest.
        let within = RetentionPolicy(keepWithin: RetentionSpan(hours: 1)).apply(to: backups, calendar: utc)
        XCTAssertEqual(kept(within), [backups[4].name])
        XCTAssertTrue(RetentionPolicy().isEmpty)
    }

    /// The same snapshot dates given to the real restic (Debian's, installed by scripts/install-deps):
    /// `restic forget --dry-run --json` must keep exactly what we keep, for the same reasons.
    func testSameDecisionsAsResticForget() throws {
        guard let restic = ["/usr/bin/restic", "/usr/local/bin/restic"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw XCTSkip("restic is not installed (scripts/install-deps installs it)")
        }
        let work = try TestEnvironment.temporaryDirectory("restic-retention")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let data = work + "/data"
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: data + "/file", contents: Data("x".utf8))
        let environment = [
            "RESTIC_PASSWORD": "test-only", "RESTIC_REPOSITORY": work + "/repo", "TZ": "UTC",
            "RESTIC_CACHE_DIR": work + "/cache",
        ]

        // Irregular dates over two years: clusters within hours, gaps of weeks (a fixed LCG, so repeatable).
        var seed: UInt64 = 42
        var date = utc.date(from: DateComponents(year: 2024, month: 2, day: 27, hour: 23, minute: 10))!
        var dates: [Date] = []
        for _ in 0..<36 {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            let hours = [1, 3, 20, 26, 70, 170, 400, 900][Int(seed >> 61)]
            date = date.addingTimeInterval(TimeInterval(hours * 3600 + Int(seed >> 40 & 0xFFF)))
            dates.append(date)
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"

        XCTAssertEqual(try runTool(restic, ["init", "--quiet"], environment: environment).status, 0)
        for date in dates {
            let result = try runTool(
                restic, ["backup", "--quiet", "--host", "h", "--time", formatter.string(from: date), data], environment: environment)
            XCTAssertEqual(result.status, 0, result.stderr)
        }

        let cases: [([String], RetentionPolicy)] = [
            (
                ["--keep-daily", "7", "--keep-weekly", "4", "--keep-monthly", "6", "--keep-yearly", "2"],
                RetentionPolicy(keepDaily: 7, keepWeekly: 4, keepMonthly: 6, keepYearly: 2)
            ),
            (["--keep-last", "3", "--keep-hourly", "5"], RetentionPolicy(keepLast: 3, keepHourly: 5)),
            (["--keep-within", "3m10d"], RetentionPolicy(keepWithin: RetentionSpan(months: 3, days: 10))),
            (["--keep-weekly", "10"], RetentionPolicy(keepWeekly: 10)),
        ]
        for (flags, policy) in cases {
            let result = try runTool(restic, ["forget", "--dry-run", "--json"] + flags, environment: environment)
            XCTAssertEqual(result.status, 0, result.stderr)
            let groups = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], result.stdout)
            let reasons = try XCTUnwrap(groups.first?["reasons"] as? [[String: Any]])
            var resticKept: [String: [String]] = [:]
            for reason in reasons {
                let snapshot = try XCTUnwrap(reason["snapshot"] as? [String: Any])
                let time = try XCTUnwrap(snapshot["time"] as? String)
                let key = String(time.prefix(19)).replacingOccurrences(of: "T", with: " ")
                resticKept[key] = (reason["matches"] as? [String] ?? []).map { $0.hasPrefix("within") ? "within" : $0 }
            }
            let ours = policy.apply(to: dates.map(listing), calendar: utc)
            var oursKept: [String: [String]] = [:]
            for decision in ours where decision.keep {
                oursKept[formatter.string(from: decision.backup.date)] = decision.reasons.map { $0.hasPrefix("within") ? "within" : $0 }
            }
            XCTAssertEqual(oursKept, resticKept, "policy \(flags.joined(separator: " "))")
        }
    }

    /// Per-host retention on a real destination: another host's backups are never counted or deleted.
    func testPrunerKeepsOtherHostsApart() async throws {
        let work = try TestEnvironment.temporaryDirectory("prune-hosts")
        defer { try? FileManager.default.removeItem(atPath: work) }
        try StoreFixture.make(at: work + "/Stores", logRows: 50, blobCount: 1)
        let folder = work + "/backups"
        let destination = LocalFolderDestination(folder: folder)
        let helper = StoreHelper(storesDirectory: work + "/Stores", destination: destination)
        let mine = try await helper.createBackup()
        setenv("STOREBACKUP_HOSTNAME", "other-host", 1)
        let theirs = try await helper.createBackup()
        unsetenv("STOREBACKUP_HOSTNAME")
        // Three more of each, dated in the past, by copying the archives under older names.
        for day in 1...3 {
            for (source, offset) in [(mine.name, 0.0), (theirs.name, 60.0)] {
                let name = BackupName.make(for: Date(timeIntervalSinceNow: -Double(day) * 86_400 - offset))
                try FileManager.default.copyItem(atPath: folder + "/" + source, toPath: folder + "/" + name)
            }
        }
        let pruner = BackupPruner(destination: destination, stateDirectory: work + "/state")
        let groups = try await pruner.plan(RetentionPolicy(keepLast: 2), host: BackupOrigin.currentHost, storesDirectory: nil)
        XCTAssertEqual(groups.count, 1)
        XCTAssertEqual(groups[0].origin?.host, BackupOrigin.currentHost)
        XCTAssertEqual(groups[0].decisions.count, 4)
        XCTAssertEqual(groups[0].toDelete.count, 2)
        let deleted = try await pruner.execute(groups)
        let remaining = try await destination.listBackups()
        XCTAssertEqual(remaining.count, 8 - 2)
        XCTAssertTrue(Set(deleted).isDisjoint(with: remaining.map(\.name)))
        let origins = await pruner.origins.origins(of: remaining, download: false)
        XCTAssertEqual(origins.values.compactMap { $0 }.filter { $0.host == "other-host" }.count, 4, "the other host's four are untouched")
    }

    /// Backups made within one second take the next free seconds. Once retention has deleted
    /// the first, its name is free again; a newer backup must still be named after the newest,
    /// or `latest` would not be the one made last. (CI met this with three creates in ~2 s.)
    func testANameRetentionFreedIsNotGivenToANewerBackup() async throws {
        let folder = try TestEnvironment.temporaryDirectory("freed-name")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let destination = LocalFolderDestination(folder: folder)
        let madeAt = utc.date(from: DateComponents(year: 2026, month: 11, day: 24, hour: 1, minute: 34, second: 17))!
            .addingTimeInterval(0.4)
        func free(_ date: Date) async -> String {
            BackupName.make(for: await BackupNameDate.choose(clock: date, at: destination, base: nil).date)
        }

        var name = await free(madeAt)
        XCTAssertEqual(name, BackupName.make(for: madeAt), "an empty destination: the date's own name")
        // The first of two same-second backups was pruned; the second holds the next second.
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/" + BackupName.make(for: madeAt.addingTimeInterval(1))))
        name = await free(madeAt)
        XCTAssertEqual(name, BackupName.make(for: madeAt.addingTimeInterval(2)))
        let latest = try await destination.resolve("latest").name
        XCTAssertEqual(latest, BackupName.make(for: madeAt.addingTimeInterval(1)))
        // Backups from earlier seconds leave the name alone; one up to an hour ahead (a burst
        // of backups, a clock stepped back) is followed, so names never go back; one further
        // ahead (a host whose clock runs fast) is not, with a warning.
        name = await free(madeAt.addingTimeInterval(5))
        XCTAssertEqual(name, BackupName.make(for: madeAt.addingTimeInterval(5)))
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/" + BackupName.make(for: madeAt.addingTimeInterval(3000))))
        name = await free(madeAt)
        XCTAssertEqual(name, BackupName.make(for: madeAt.addingTimeInterval(3001)))
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/" + BackupName.make(for: madeAt.addingTimeInterval(3602))))
        let far = await BackupNameDate.choose(clock: madeAt, at: destination, base: nil)
        XCTAssertEqual(BackupName.make(for: far.date), BackupName.make(for: madeAt))
        XCTAssertNotNil(far.warning)
    }

    // MARK: chains (issue 35)

    /// A kept incremental keeps its whole chain, even where the policy would prune the bases
    /// by age; a dependent nothing keeps goes, and goes before anything older.
    func testPruneKeepsTheChainOfAKeptIncremental() async throws {
        let work = try TestEnvironment.temporaryDirectory("prune-chains")
        defer { try? FileManager.default.removeItem(atPath: work) }
        try StoreFixture.make(at: work + "/Stores", logRows: 50, blobCount: 1)
        let folder = work + "/backups"
        let destination = LocalFolderDestination(folder: folder)
        let made = try await StoreHelper(storesDirectory: work + "/Stores", destination: destination).createBackup()
        // Real archives (so prune reads their origin) under the names of a chain.
        func day(_ day: Int, month: Int = 11) -> Date { utc.date(from: DateComponents(year: 2026, month: month, day: day, hour: 2))! }
        let old = BackupName.make(for: day(1, month: 10))
        let full = BackupName.make(for: day(1))
        let first = BackupName.makeIncremental(for: day(2), base: full)!
        let loose = BackupName.makeIncremental(for: day(3), base: full)!
        let newest = BackupName.makeIncremental(for: day(20), base: first)!
        for name in [old, full, first, loose, newest] {
            try FileManager.default.copyItem(atPath: folder + "/" + made.name, toPath: folder + "/" + name)
        }
        try FileManager.default.removeItem(atPath: folder + "/" + made.name)

        let pruner = BackupPruner(destination: destination, stateDirectory: work + "/state")
        let policy = RetentionPolicy(keepWithin: RetentionSpan(days: 2))
        let listed = try await destination.listBackups()
        XCTAssertEqual(kept(policy.apply(to: listed, calendar: utc)), [newest], "the policy alone")
        let groups = try await pruner.plan(policy, host: nil, storesDirectory: nil, calendar: utc)
        XCTAssertEqual(groups.count, 1)
        let reasons = Dictionary(uniqueKeysWithValues: groups[0].decisions.map { ($0.backup.name, $0.reasons) })
        XCTAssertEqual(reasons[newest], ["within 2d"])
        XCTAssertEqual(reasons[first], ["base of \(newest)"])
        XCTAssertEqual(reasons[full], ["base of \(first)"])
        XCTAssertEqual(reasons[loose], [])
        XCTAssertEqual(reasons[old], [])

        let dryRun = try runStoreBackup(["prune", "--keep-within", "2d", "--dry-run", "--to", folder], environment: ["HOME": work])
        XCTAssertEqual(dryRun.status, 0, dryRun.stderr)
        XCTAssertTrue(dryRun.stdout.contains("keep    \(full)  (base of \(first))"), dryRun.stdout)
        XCTAssertTrue(dryRun.stdout.contains("delete  \(loose)"), dryRun.stdout)

        let deleted = try await pruner.execute(groups)
        XCTAssertEqual(deleted, [loose, old], "newest first")
        let remaining = try await destination.listBackups()
        XCTAssertEqual(Set(remaining.map(\.name)), [full, first, newest])
    }

    /// The test above prunes copies of one archive under chain-shaped names; this one prunes
    /// real chains (fulls and incrementals create made, a day apart), then checks that what
    /// prune kept still restores: every kept backup verifies through its chain, and the
    /// newest restores to the store as it was when it was made.
    func testWhatPruneKeepsOfRealChainsVerifiesAndRestores() async throws {
        let work = try TestEnvironment.temporaryDirectory("prune-real-chains")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let clock = Locked(Date())
        var helper = StoreHelper(storesDirectory: store, destination: LocalFolderDestination(folder: work + "/backups"))
        helper.now = { clock.withLock { $0 } }
        let chained = ChainedHelper(helper, policy: IncrementalPolicy(maxDeltaShare: 1))
        var fullPolicy = chained
        fullPolicy.options.incremental?.forceFull = true

        // Oct 30 full <- Oct 31 <- Nov 1; Nov 2 full <- Nov 3: keeping the newest backup of
        // each month keeps Nov 3 and Oct 31, so their bases (Nov 2, Oct 30) stay and Nov 1 goes.
        var made: [BackupResult] = []
        var rows: [String: String] = [:]
        for (index, (month, day)) in [(10, 30), (10, 31), (11, 1), (11, 2), (11, 3)].enumerated() {
            let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
            try app.execute("INSERT INTO log(note) VALUES('day \(month)-\(day)')", operation: "test change")
            app.close()
            clock.withLock { $0 = utc.date(from: DateComponents(year: 2026, month: month, day: day, hour: 12))! }
            let backup = try await (index == 3 ? fullPolicy : chained).createBackup()
            made.append(backup)
            rows[backup.name] = try StoreFixture.query(store + "/App.sqlite", "SELECT group_concat(note, '|') FROM log")
        }
        XCTAssertEqual(made.map(\.kind), ["full", "incremental", "incremental", "full", "incremental"])
        XCTAssertEqual(made.map { $0.base ?? "" }, ["", made[0].name, made[1].name, "", made[3].name])
        let newest = made[4].name
        let tree = try StoreFixture.describe(store, includeJournals: false, includeDatabaseContent: false)

        let repository = chained.repository
        let plan = try await repository.retentionPlan(RetentionPolicy(keepMonthly: 2), calendar: utc)
        let deleted = try await repository.prune(plan)
        XCTAssertEqual(deleted, [made[2].name])
        let kept = [made[4], made[3], made[1], made[0]].map(\.name)
        let listed = try await repository.list()
        XCTAssertEqual(listed.map(\.name), kept)
        for name in kept {
            let verified = try await repository.verify(.named(name))[0]
            XCTAssertTrue(verified.ok, "\(name): \(verified.problem ?? "")")
        }

        let restoredStore = work + "/Restored"
        let restored = try await StoreHelper(storesDirectory: restoredStore, destination: repository.destination)
            .restore("latest")
        XCTAssertEqual(restored.backupName, newest)
        XCTAssertEqual(try StoreFixture.describe(restoredStore, includeJournals: false, includeDatabaseContent: false), tree)
        XCTAssertEqual(try StoreFixture.query(restoredStore + "/App.sqlite", "SELECT group_concat(note, '|') FROM log"), rows[newest])
        XCTAssertEqual(try StoreFixture.query(restoredStore + "/App.sqlite", "PRAGMA integrity_check"), "ok")
    }

    /// When S3 Object Lock keeps a backup prune meant to delete, the backups its chain needs
    /// are kept too, and said so.
    func testExecuteKeepsTheChainOfABackupItCannotDelete() async throws {
        let folder = try TestEnvironment.temporaryDirectory("prune-locked-chain")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let full = BackupName.make(for: Date(timeIntervalSince1970: 1_790_000_000))
        let middle = BackupName.makeIncremental(for: Date(timeIntervalSince1970: 1_790_086_400), base: full)!
        let top = BackupName.makeIncremental(for: Date(timeIntervalSince1970: 1_790_172_800), base: middle)!
        let other = BackupName.make(for: Date(timeIntervalSince1970: 1_789_000_000))
        for name in [full, middle, top, other] {
            FileManager.default.createFile(atPath: folder + "/" + name, contents: Data("x".utf8))
        }
        let destination = RefusingDeletes(base: LocalFolderDestination(folder: folder), refused: [top])
        let doomed = try await destination.sortedBackups().map { RetentionPolicy.Decision(backup: $0, reasons: []) }
        let kept = Locked<[String]>([])
        let deleted = try await BackupPruner(destination: destination, stateDirectory: nil).execute(
            [BackupPruner.Group(origin: nil, decisions: doomed)],
            locked: { name, _ in kept.withLock { $0.append("locked " + name) } },
            keptAsBase: { name, dependent in kept.withLock { $0.append("\(name) for \(dependent)") } })
        XCTAssertEqual(deleted, [other])
        XCTAssertEqual(kept.withLock { $0 }, ["locked \(top)", "\(middle) for \(top)", "\(full) for \(middle)"])
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: folder)), [full, middle, top])
    }
}
