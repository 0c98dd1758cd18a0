import Foundation
import XCTest

@testable import StoreBackup

/// Issue 36, point 4, and issue 54: `--limit-upload` and `--limit-download` cap the
/// command's total rate, across S3's parallel parts and mirrors, for every remote kind.
///
/// The oracle is the server's side: the fault proxy (Tests/Servers/faultproxy.py) in front
/// of each server stamps when the first and the last body bytes of each request (in TCP
/// mode, each connection's bytes: SSH, TLS) passed it, so the rate is the archive's bytes
/// over the span the proxy saw them in, not the command's wall time. Each capped run is
/// paired with an unlimited run of the same transfer, which must break the cap by a clear
/// margin: were the limit ignored, the capped check would fail. How close the rate comes
/// to the cap is measured by scripts/bench_lib/ratelimit.py.
final class BandwidthLimitTests: XCTestCase {
    func testRatesParseWithDecimalSuffixes() throws {
        XCTAssertEqual(try RateLimit.parse("5M", option: "--limit-upload").bytesPerSecond, 5_000_000)
        XCTAssertEqual(try RateLimit.parse("500k", option: "--limit-upload").bytesPerSecond, 500_000)
        XCTAssertEqual(try RateLimit.parse("1.5G", option: "--limit-upload").bytesPerSecond, 1_500_000_000)
        XCTAssertEqual(try RateLimit.parse("20000", option: "--limit-upload").bytesPerSecond, 20_000)
        XCTAssertEqual(try RateLimit.parse("5M", option: "x").text, "5M")
        for bad in ["", "5X", "M", "-5M", "5 MB", "1k", "5e6", "fast"] {
            XCTAssertThrowsError(try RateLimit.parse(bad, option: "--limit-upload"), bad) { error in
                XCTAssertTrue("\(error)".hasPrefix("--limit-upload: \"\(bad)\" is not a usable rate"), "\(error)")
            }
        }
    }

    func testConfigurationTakesRetryBudgetRatesAndLock() throws {
        let configuration = try BackupConfiguration.parse(
            yaml: """
                retry-for: 10m
                limit-upload: 5M
                limit-download: 20M
                retain-days: 30
                retain-mode: compliance
                stores: [{name: app, path: /srv/Stores, schedule: daily 02:00, destination: "s3://b/app"}]
                """)
        let options = configuration.destinationOptions(environment: [:])
        XCTAssertEqual(options.retry.budget, 600)
        XCTAssertEqual(options.transport.uploadLimit?.bytesPerSecond, 5_000_000)
        XCTAssertEqual(options.transport.downloadLimit?.bytesPerSecond, 20_000_000)
        XCTAssertEqual(options.objectLock, ObjectLockRetention(days: 30, mode: .compliance))
        XCTAssertThrowsError(
            try BackupConfiguration.parse(
                yaml: """
                    limit-upload: 5 megabytes
                    stores: [{name: app, path: /srv/Stores, schedule: daily 02:00}]
                    """)
        ) { error in
            XCTAssertTrue("\(error)".contains("limit-upload"), "\(error)")
        }
    }

    func testBadRateOnTheCommandLineIsAClearError() throws {
        let result = try runStoreBackup(["list", "--to", "/nonexistent", "--limit-upload", "5X"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.stderr.contains("--limit-upload: \"5X\" is not a usable rate"), result.stderr)
    }

    // MARK: on the wire

    var servers: TestServers!
    var work = ""
    var store = ""

    override func setUpWithError() throws {
        servers = try TestServers(label: "ratelimit")
        work = try TestEnvironment.temporaryDirectory("ratelimit")
        store = work + "/Stores"
    }

    override func tearDownWithError() throws {
        servers?.stop()
        try? FileManager.default.removeItem(atPath: work)
    }

    /// A store whose archive is `bytes` of random data (incompressible) and a little more.
    func makeStore(randomBytes bytes: Int) throws {
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let random = try XCTUnwrap(FileHandle(forReadingAtPath: "/dev/urandom"))
        try random.readData(ofLength: bytes).write(to: URL(fileURLWithPath: store + "/.App_SUPPORT/video.bin"))
    }

    /// A fault proxy without faults, in front of `port`; TCP mode for SSH and TLS. Its small
    /// send buffer keeps the stamps of a download within ``WireSpan/downloadSlack`` of the
    /// client's reading.
    func startProxy(upstream port: Int, tcp: Bool = false) throws -> WireProxy {
        let info = try servers.start(
            "proxy", arguments: ["--upstream", "127.0.0.1:\(port)", "--send-buffer", "131072"] + (tcp ? ["--tcp"] : []))
        return WireProxy(port: info["port"] as! Int, logFile: info["log"] as! String)
    }

    /// S3, one destination: the archive (> 32 MiB: a multipart upload, its parts in flight
    /// together) goes up capped, then unlimited; then `verify` downloads it capped and
    /// unlimited. The proxy sees the capped runs within the cap and the unlimited ones far
    /// beyond it.
    func testOneDestinationIsCappedOnTheWireBothWays() throws {
        let s3 = try servers.start("s3")
        let backend = ContractBackend.s3(s3, work: work)
        let payload = 36 << 20
        try makeStore(randomBytes: payload)
        let upload = 12_000_000.0, download = 18_000_000.0

        var spans: [String: WireSpan] = [:]
        for (folder, limit) in [("capped", ["--limit-upload", "12M"]), ("unlimited", [])] {
            let proxy = try startProxy(upstream: s3["port"] as! Int)
            let created = try runStoreBackup(
                ["create", store] + (try backend.arguments(folder, "--to", proxy.port)) + limit, environment: backend.environment)
            XCTAssertEqual(created.status, 0, created.stderr)
            let span = try proxy.span(.up, atLeast: payload)
            XCTAssertGreaterThanOrEqual(span.transfers, 3, "a multipart upload, its parts apart: \(span)")
            spans["upload " + folder] = span
        }
        for (limit, key) in [(["--limit-download", "18M"], "download capped"), ([], "download unlimited")] {
            let proxy = try startProxy(upstream: s3["port"] as! Int)
            let verified = try runStoreBackup(
                ["verify", "latest"] + (try backend.arguments("capped", "--from", proxy.port)) + limit, environment: backend.environment)
            XCTAssertEqual(verified.status, 0, verified.stderr)
            spans[key] = try proxy.span(.down, atLeast: payload)
        }
        print("BandwidthLimitTests one destination: \(spans.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" })")
        assertCapped(spans["upload capped"]!, at: upload, "S3 upload, 12M")
        assertFarBeyond(spans["upload unlimited"]!, cap: upload, "S3 upload, unlimited")
        assertCapped(spans["download capped"]!, at: download, way: .down, "S3 download, 18M")
        assertFarBeyond(spans["download unlimited"]!, cap: download, way: .down, "S3 download, unlimited")
    }

    /// `create --to S3 --to WebDAV --limit-upload 2M`: the mirrors upload together and share
    /// the cap (the option's help, README and docs/bandwidth-limits.md: the command's total,
    /// across parallel parts and mirrors), so both proxies' bytes together stay within 2M
    /// over the span of both. One cap per mirror would give twice that.
    func testMirrorsShareOneCap() throws {
        let s3 = try servers.start("s3"), dav = try servers.start("webdav")
        let s3Backend = ContractBackend.s3(s3, work: work), davBackend = ContractBackend.webDAV(dav, work: work)
        let payload = 3_000_000
        try makeStore(randomBytes: payload)
        let s3Proxy = try startProxy(upstream: s3["port"] as! Int), davProxy = try startProxy(upstream: dav["port"] as! Int)
        let created = try runStoreBackup(
            ["create", store, "--limit-upload", "2M"] + (try s3Backend.arguments("mirror", "--to", s3Proxy.port))
                + (try davBackend.arguments("mirror", "--to", davProxy.port)),
            environment: s3Backend.environment.merging(davBackend.environment) { a, _ in a })
        XCTAssertEqual(created.status, 0, created.stderr)
        let toS3 = try s3Proxy.span(.up, atLeast: payload), toDAV = try davProxy.span(.up, atLeast: payload)
        let both = toS3.merged(with: toDAV)
        print("BandwidthLimitTests mirrors: S3 \(toS3), WebDAV \(toDAV), together \(both)")
        // Without overlap a cap per mirror would look like a shared one: the check needs it.
        let overlap = min(toS3.last, toDAV.last) - max(toS3.first, toDAV.first)
        XCTAssertGreaterThan(overlap, 0.5 * min(toS3.seconds, toDAV.seconds), "the mirrors upload together: \(toS3), \(toDAV)")
        assertCapped(both, at: 2_000_000, "both mirrors together, 2M")
    }

    /// SFTP (libcurl over SSH): the upload seen by a TCP relay in front of OpenSSH, capped
    /// and unlimited.
    func testSFTPUploadIsCappedOnTheWire() throws {
        let sftp = try servers.start("sftp")
        let backend = try ContractBackend.sftp(sftp, work: work)
        try assertUploadCapped(upstream: sftp["port"] as! Int, tcp: true, label: "SFTP") { folder, port in
            (try backend.arguments(folder, "--to", port), backend.environment)
        }
    }

    /// Dropbox (the emulator, over TLS): the upload seen by a TCP relay in front of it,
    /// capped and unlimited.
    func testDropboxUploadIsCappedOnTheWire() throws {
        let emulator = try DropboxEmulatorClient(label: "ratelimit-dropbox")
        defer { emulator.stop() }
        let api = try XCTUnwrap(URL(string: emulator.apiURL)?.port)
        try XCTSkipUnless(URL(string: emulator.contentURL)?.port == api, "the emulator serves both hosts on one port")
        try assertUploadCapped(upstream: api, tcp: true, label: "Dropbox") { folder, port in
            // One port serves both hosts: TLS goes through the relay untouched.
            var environment = emulator.environment(home: work, token: emulator.accessToken)
            environment["STOREBACKUP_DROPBOX_API_URL"] = emulator.apiURL.replacingOccurrences(of: ":\(api)", with: ":\(port)")
            environment["STOREBACKUP_DROPBOX_CONTENT_URL"] = emulator.contentURL.replacingOccurrences(of: ":\(api)", with: ":\(port)")
            return (["--to", "dropbox:///\(folder)"], environment)
        }
    }

    /// A 4 MB archive created at 2M and unlimited, each through a fresh proxy; `destination`
    /// gives the arguments and environment for a folder through the proxy's port.
    func assertUploadCapped(
        upstream: Int, tcp: Bool, label: String,
        destination: (_ folder: String, _ proxyPort: Int) throws -> (arguments: [String], environment: [String: String]),
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let payload = 4_000_000
        try makeStore(randomBytes: payload)
        var spans: [WireSpan] = []
        for (folder, limit) in [("capped", ["--limit-upload", "2M"]), ("unlimited", [])] {
            let proxy = try startProxy(upstream: upstream, tcp: tcp)
            let to = try destination(folder, proxy.port)
            let created = try runStoreBackup(["create", store] + to.arguments + limit, environment: to.environment)
            XCTAssertEqual(created.status, 0, "\(label) \(folder): \(created.stderr)", file: file, line: line)
            spans.append(try proxy.span(.up, atLeast: payload))
        }
        print("BandwidthLimitTests \(label): capped \(spans[0]), unlimited \(spans[1])")
        assertCapped(spans[0], at: 2_000_000, "\(label) upload, 2M", file: file, line: line)
        assertFarBeyond(spans[1], cap: 2_000_000, "\(label) upload, unlimited", file: file, line: line)
    }

    /// The bytes the cap lets through in `span`: the limiter hands out up to 0.25 s of idle
    /// allowance at once (`RateLimit.pace`), the proxy's first stamp may come a scheduling
    /// delay late (0.25 s more), and SSH or TLS framing adds a few percent (5 %). A download
    /// is stamped as it enters the socket, ahead of the client's reading by what the buffers
    /// between them hold (``WireSpan/downloadSlack``).
    static func allowance(_ span: WireSpan, cap: Double, way: WireSpan.Way) -> Double {
        cap * (span.seconds + 0.5) * 1.05 + (way == .down ? WireSpan.downloadSlack : 0)
    }

    func assertCapped(
        _ span: WireSpan, at cap: Double, way: WireSpan.Way = .up, _ what: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertLessThanOrEqual(span.bytes, Self.allowance(span, cap: cap, way: way), "\(what): \(span)", file: file, line: line)
    }

    /// The unlimited run must exceed what the cap would allow by half again: proof that the
    /// capped check fails when the limit is ignored.
    func assertFarBeyond(
        _ span: WireSpan, cap: Double, way: WireSpan.Way = .up, _ what: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertGreaterThan(
            span.bytes, 1.5 * Self.allowance(span, cap: cap, way: way), "\(what) is not clearly beyond the cap: \(span)", file: file,
            line: line)
    }
}

/// The fault proxy's log, read from its file (one JSON object per request, or per
/// connection in TCP mode).
struct WireProxy {
    let port: Int
    let logFile: String

    func entries() -> [[String: Any]] {
        let text = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The span of the transfers that carried at least 256 KiB `way` (the archive's, not
    /// the listings' and handshakes'), once they add up to `bytes`. The proxy logs a
    /// request (a connection) when it is done relaying it, which can be a moment after the
    /// client is: the log is polled for that, up to 20 s.
    func span(_ way: WireSpan.Way, atLeast bytes: Int) throws -> WireSpan {
        let deadline = Date().addingTimeInterval(20)
        while true {
            let span = WireSpan(entries(), way: way)
            if let span, span.bytes >= Double(bytes) { return span }
            guard Date() < deadline else {
                throw NSError(
                    domain: "WireProxy", code: 1,
                    userInfo: [NSLocalizedDescriptionKey: "the proxy never logged \(bytes) bytes \(way): \(entries())"])
            }
            usleep(20_000)
        }
    }
}

/// Body bytes one way and the span from the first of them to the last, by the proxy's
/// clock, over one or more transfers.
struct WireSpan: CustomStringConvertible {
    enum Way: String { case up, down }

    /// What the socket buffers between the proxy (its send buffer set to 128 KiB) and a
    /// client reading at its pace may hold: measured at up to 0.6 MB on loopback.
    static let downloadSlack = 1_000_000.0

    var bytes: Double
    var first: Double
    var last: Double
    var transfers: Int

    var seconds: Double { last - first }
    var rate: Double { bytes / max(seconds, 0.001) }

    init?(_ entries: [[String: Any]], way: Way) {
        let big = entries.filter { (($0["\(way)_bytes"] as? NSNumber)?.intValue ?? 0) >= 256 << 10 }
        let firsts = big.compactMap { ($0["\(way)_first"] as? NSNumber)?.doubleValue }
        let lasts = big.compactMap { ($0["\(way)_last"] as? NSNumber)?.doubleValue }
        guard !big.isEmpty, firsts.count == big.count, lasts.count == big.count else { return nil }
        bytes = big.reduce(0) { $0 + (($1["\(way)_bytes"] as? NSNumber)?.doubleValue ?? 0) }
        first = firsts.min()!
        last = lasts.max()!
        transfers = big.count
    }

    func merged(with other: WireSpan) -> WireSpan {
        var merged = self
        merged.bytes += other.bytes
        merged.first = min(first, other.first)
        merged.last = max(last, other.last)
        merged.transfers += other.transfers
        return merged
    }

    var description: String {
        String(format: "%.2f MB in %.2f s (%.2f MB/s, %d transfers)", bytes / 1e6, seconds, rate / 1e6, transfers)
    }
}
