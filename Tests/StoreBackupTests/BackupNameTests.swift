import Foundation
import XCTest

@testable import StoreBackup

final class BackupNameTests: XCTestCase {
    func testNamesAreSortableUTCToTheSecond() {
        let date = Date(timeIntervalSince1970: 1_795_317_307)  // 2026-11-22 03:15:07 UTC
        XCTAssertEqual(BackupName.make(for: date), "2026-11-22 031507 Stores.zip")
        XCTAssertEqual(BackupName.date(of: "2026-11-22 031507 Stores.zip"), date)
    }

    func testSeedNamingIsUnderstood() throws {
        let date = try XCTUnwrap(BackupName.date(of: "[2026-Nov-21] 10.15 PM Stores.zip"))
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        XCTAssertEqual([parts.year, parts.month, parts.day, parts.hour, parts.minute], [2026, 11, 21, 22, 15])
    }

    /// The hand-written calendar arithmetic agrees with Foundation's formatters on seeded
    /// random instants from 1970 to 9999, and refuses what a strict reading refuses.
    func testUTCTimestampsMatchFoundation() {
        let compact = DateFormatter()
        compact.locale = Locale(identifier: "en_US_POSIX")
        compact.timeZone = TimeZone(identifier: "UTC")
        compact.dateFormat = "yyyy-MM-dd HHmmss"
        let iso = ISO8601DateFormatter()
        var generator = SplitMix64(seed: 20261126)
        let edges: [TimeInterval] = [0, 951_782_400, 4_107_542_399, 253_402_300_799, 1_795_317_307.75]
        for seconds in edges + (0..<2000).map({ _ in TimeInterval(Int.random(in: 0...253_402_300_799, using: &generator)) }) {
            let date = Date(timeIntervalSince1970: seconds)
            let text = UTCTimestamp.compact(date)
            XCTAssertEqual(text, compact.string(from: date), "\(seconds)")
            XCTAssertEqual(UTCTimestamp.iso8601(date), iso.string(from: date), "\(seconds)")
            XCTAssertEqual(UTCTimestamp.parseCompact(Substring(text)), Date(timeIntervalSince1970: seconds.rounded(.down)), text)
            XCTAssertEqual(UTCTimestamp.parseISO8601(iso.string(from: date)), iso.date(from: iso.string(from: date)), "\(seconds)")
        }
        // storebackup's JSON files read and write dates as Foundation's `.iso8601` does.
        struct Stamped: Codable, Equatable { var at: Date }
        let stamped = Stamped(at: Date(timeIntervalSince1970: 1_795_317_307))
        let foundationEncoder = JSONEncoder()
        foundationEncoder.dateEncodingStrategy = .iso8601
        let ownEncoder = JSONEncoder()
        ownEncoder.dateEncodingStrategy = .utcTimestamp
        let ownDecoder = JSONDecoder()
        ownDecoder.dateDecodingStrategy = .utcTimestamp
        XCTAssertEqual(try ownEncoder.encode(stamped), try foundationEncoder.encode(stamped))
        XCTAssertEqual(try ownDecoder.decode(Stamped.self, from: foundationEncoder.encode(stamped)), stamped)
        XCTAssertThrowsError(try ownDecoder.decode(Stamped.self, from: Data(#"{"at":"2026-02-30T00:00:00Z"}"#.utf8)))
        for valid in ["2000-02-29 000000", "2024-02-29 235959", "0001-01-01 000000"] {
            XCTAssertNotNil(UTCTimestamp.parseCompact(Substring(valid)), valid)
        }
        for invalid in [
            "2025-02-29 120000", "2100-02-29 120000", "2026-04-31 000000", "2026-11-22 240000",
            "2026-11-22 036000", "2026-11-22 031560", "0000-01-01 000000", "2026-1-22 0315070",
            "2026-11-22T031507", "2026-11-22 03150", "+026-11-22 031507", "２026-11-22 031507",
        ] {
            XCTAssertNil(UTCTimestamp.parseCompact(Substring(invalid)), invalid)
        }
    }

    func testOnlyStoresZipNamesAreBackups() {
        XCTAssertTrue(BackupName.isBackup("anything Stores.zip"))
        XCTAssertFalse(BackupName.isBackup("Stores.zip"))
        XCTAssertFalse(BackupName.isBackup(".storebackup-tmp-1 Stores.zip"))
        XCTAssertFalse(BackupName.isBackup("2026 Stores.zip.partial"))
        XCTAssertThrowsError(try BackupName.validate("../x Stores.zip"))
    }
}
