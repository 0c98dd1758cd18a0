import Foundation
import XCTest

@testable import StoreBackup

/// Levels read back from the names of a chain shaped as compaction shapes it, what retention
/// with levels keeps, and which points compaction merges (docs/levels.md).
final class PointLevelsTests: XCTestCase {
    /// `2026-12-0<day> <time>`, as a name's own date.
    private static func name(_ day: Int, _ time: String, on base: (Int, String)? = nil) -> String {
        let own = "2026-12-0\(day) \(time)"
        guard let base else { return own + " Stores.zip" }
        return own + " incremental on 2026-12-0\(base.0) \(base.1) Stores.zip"
    }

    /// Day 1: a full at 00:30; hour 0 has two points merged into 00:50:01; hour 1 two points
    /// merged into 01:10:01; hour 2 one point (no merge); the day merged into 02:05:01 on the
    /// full. Day 2: hour 0's two points merged into 00:10:01 on the daily; hour 1 one point so far.
    private static let chain: [String: String] = [
        "full": name(1, "003000"),
        "m1": name(1, "004000", on: (1, "003000")),
        "m2": name(1, "005000", on: (1, "004000")),
        "hour0": name(1, "005001", on: (1, "003000")),
        "n1": name(1, "010500", on: (1, "005001")),
        "n2": name(1, "011000", on: (1, "010500")),
        "hour1": name(1, "011001", on: (1, "005001")),
        "p1": name(1, "020500", on: (1, "011001")),
        "day1": name(1, "020501", on: (1, "003000")),
        "q1": name(2, "000500", on: (1, "020501")),
        "q2": name(2, "001000", on: (2, "000500")),
        "day2hour0": name(2, "001001", on: (1, "020501")),
        "r1": name(2, "010000", on: (2, "001001")),
    ]

    private static func listing(_ names: [String]) -> [BackupListing] {
        names.map { BackupListing(name: $0, size: 1, date: BackupName.date(of: $0)!, modified: nil) }
    }

    func testLevelsReadBackFromTheNames() {
        let levels = PointLevels(BackupChains(Self.listing(Array(Self.chain.values))))
        let expected: [String: PointLevel] = [
            "full": .full, "m1": .minute, "m2": .minute, "hour0": .hourly, "n1": .minute, "n2": .minute, "hour1": .hourly,
            "p1": .minute, "day1": .daily, "q1": .minute, "q2": .minute, "day2hour0": .daily, "r1": .hourly,
        ]
        for (key, level) in expected {
            XCTAssertEqual(levels.level(of: Self.chain[key]!), level, key)
        }
    }

    /// A minute point older than the minute span goes; what kept points stand on stays.
    func testRetentionKeepsEachLevelForItsSpanAndTheChainsBehindIt() {
        var policy = RetentionPolicy()
        policy.levels = PointLevelPolicy(minuteSpan: 1_800, hourlySpan: 86_400, dailySpan: 35 * 86_400)
        let decisions = policy.apply(to: Self.listing(Array(Self.chain.values)), calendar: Calendar(identifier: .gregorian))
        let groups = BackupPruner.keepingChains(
            [RetentionGroup(origin: nil, decisions: decisions)], chains: BackupChains(Self.listing(Array(Self.chain.values))))
        let kept = Set(groups[0].decisions.filter(\.keep).map(\.backup.name))
        let expectedKept = Set(["full", "hour0", "hour1", "day1", "day2hour0", "r1"].map { Self.chain[$0]! })
        XCTAssertEqual(kept, expectedKept)
        let reasons = Dictionary(uniqueKeysWithValues: groups[0].decisions.map { ($0.backup.name, $0.reasons) })
        XCTAssertEqual(reasons[Self.chain["hour0"]!], ["base of \(Self.chain["hour1"]!)"])
        XCTAssertEqual(reasons[Self.chain["hour1"]!]?.first?.hasPrefix("hourly point within"), true)
    }

    func testCompactionMergesAnEndedHourThenAnEndedDay() {
        let c = Self.chain
        let hour2 = BackupName.date(of: c["p1"]!)!.addingTimeInterval(3_600)
        // Hour 0 ended: its two points go onto the full.
        var plan = PointCompaction.plan(.hour, links: [c["full"]!, c["m1"]!, c["m2"]!], now: hour2)
        XCTAssertEqual(plan?.base, c["full"]!)
        XCTAssertEqual(plan?.parts, [c["m1"]!, c["m2"]!])
        // Not while the hour lasts, and not a point already on the previous head.
        XCTAssertNil(PointCompaction.plan(.hour, links: [c["full"]!, c["m1"]!, c["m2"]!], now: BackupName.date(of: c["m2"]!)!))
        XCTAssertNil(PointCompaction.plan(.hour, links: [c["full"]!, c["hour0"]!, c["hour1"]!, c["p1"]!], now: hour2))
        XCTAssertNil(PointCompaction.plan(.hour, links: [c["full"]!], now: hour2))
        // The day ended: its hour heads go onto the full.
        let day2 = BackupName.date(of: c["q1"]!)!
        plan = PointCompaction.plan(.day, links: [c["full"]!, c["hour0"]!, c["hour1"]!, c["p1"]!], now: day2)
        XCTAssertEqual(plan?.base, c["full"]!)
        XCTAssertEqual(plan?.parts, [c["hour0"]!, c["hour1"]!, c["p1"]!])
        XCTAssertNil(PointCompaction.plan(.day, links: [c["full"]!, c["day1"]!], now: day2))
    }

    /// A merged point takes a free second of its newest part's hour, later ones first.
    func testAMergedPointIsNamedWithinItsHour() {
        let newest = UTCTimestamp.parseCompact("2026-12-01 015958")!
        let before = BackupListing(name: "x", size: 1, date: UTCTimestamp.parseCompact("2026-12-01 015900")!, modified: nil)
        let dates = PointCompaction.candidateDates(after: newest, listing: [before]).map(UTCTimestamp.compact)
        XCTAssertEqual(dates.first, "2026-12-01 015959")
        XCTAssertEqual(dates[1], "2026-12-01 015957")
        XCTAssertFalse(dates.contains("2026-12-01 020000"))
        XCTAssertFalse(dates.contains("2026-12-01 015900"))
    }
}

/// `levels:` in the configuration: on, spans, and only with `incremental: true`.
final class PointLevelsConfigurationTests: XCTestCase {
    private func parse(_ levels: String, incremental: Bool = true) throws -> StoreJob {
        let yaml = """
            stores:
              - name: app
                path: /srv/app/Stores
                schedule: every 1m
                \(incremental ? "incremental: true" : "level: 1")
                levels: \(levels)
            """
        let configuration = try BackupConfiguration.parse(yaml: yaml, file: "/etc/test.yml", environment: [:])
        return try XCTUnwrap(configuration.stores.first)
    }

    func testLevelsOnSpansAndTheirRetention() throws {
        XCTAssertEqual(try parse("on").levels, PointLevelPolicy())
        XCTAssertNil(try parse("off").levels)
        let job = try parse("{minute: 12h, hourly: 3d}")
        XCTAssertEqual(job.levels, PointLevelPolicy(minuteSpan: 12 * 3_600, hourlySpan: 3 * 86_400, dailySpan: 35 * 86_400))
        XCTAssertEqual(job.appliedRetention?.levels, job.levels, "retention applies the levels' spans")
        XCTAssertEqual(
            job.chainPolicy?.maxChainLength, PointLevelPolicy.chainBound(fullEvery: 7 * 86_400), "max-chain rises to the levels' bound")
        XCTAssertNil(try parse("on").retention, "levels alone set no other rule")
    }

    func testLevelsAreRefusedWhereTheyWouldDoNothing() {
        XCTAssertThrowsError(try parse("{minute: 0s}")) { XCTAssertTrue("\($0)".contains("levels.minute")) }
        XCTAssertThrowsError(try parse("{weekly: 4w}")) { XCTAssertTrue("\($0)".contains("unknown key")) }
        XCTAssertThrowsError(try parse("sometimes")) { XCTAssertTrue("\($0)".contains("must be on, off")) }
        XCTAssertThrowsError(try parse("on", incremental: false)) { XCTAssertTrue("\($0)".contains("only with incremental: true")) }
    }
}
