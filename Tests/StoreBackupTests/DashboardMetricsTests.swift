import Foundation
import XCTest

@testable import StoreBackup

/// Examples/grafana/storebackup.json queries only metrics the tool exports: the names are
/// read from the metrics file the real binary writes after a backup, a failed backup, a
/// passing drill and a failing drill, and compared with every metric name in the
/// dashboard's PromQL (panels and variables).
final class DashboardMetricsTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("dashboard")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: work)
    }

    static var dashboardPath: String { TestEnvironment.packageRoot + "/Examples/grafana/storebackup.json" }

    func testEveryMetricTheDashboardQueriesIsExported() throws {
        let exported = try exportedMetricNames()
        XCTAssertTrue(exported.contains(BackupMetrics.lastVerifySuccess), "\(exported.sorted())")

        let data = try Data(contentsOf: URL(fileURLWithPath: Self.dashboardPath))
        let dashboard = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
        XCTAssertEqual(dashboard["uid"] as? String, "storebackup")
        let variables = try XCTUnwrap((dashboard["templating"] as? [String: Any])?["list"] as? [[String: Any]])
        XCTAssertTrue(
            variables.contains { $0["type"] as? String == "datasource" && $0["query"] as? String == "prometheus" },
            "a Prometheus datasource variable")
        var expressions: [String] = []
        for panel in try XCTUnwrap(dashboard["panels"] as? [[String: Any]]) {
            XCTAssertEqual((panel["datasource"] as? [String: Any])?["uid"] as? String, "${datasource}", "\(panel["title"] ?? "")")
            let targets = try XCTUnwrap(panel["targets"] as? [[String: Any]], "\(panel["title"] ?? "")")
            expressions += targets.compactMap { $0["expr"] as? String }
        }
        for variable in variables where variable["type"] as? String == "query" {
            let query = ((variable["query"] as? [String: Any])?["query"] as? String) ?? (variable["query"] as? String) ?? ""
            // Grafana's label_values(METRIC, LABEL): the metric is PromQL, the label is not.
            let inner = query.hasPrefix("label_values(") ? String(query.dropFirst(13).prefix { $0 != "," }) : query
            expressions.append(inner)
        }
        XCTAssertGreaterThanOrEqual(expressions.count, 8)

        var queried = Set<String>()
        for expression in expressions {
            let names = try PromQLNames.metrics(in: expression)
            XCTAssertFalse(names.isEmpty, "no metric in \(expression)")
            queried.formUnion(names)
        }
        XCTAssertEqual(queried.subtracting(exported), [], "queried but not exported (exported: \(exported.sorted()))")
        // The panels the dashboard promises: last success, duration, size, uploads, failures, last
        // verify, the recovery point and the points by level.
        for name in [
            BackupMetrics.lastSuccess, BackupMetrics.duration, BackupMetrics.archiveSize, BackupMetrics.uploadedBytes,
            BackupMetrics.backups, BackupMetrics.lastVerifySuccess, BackupMetrics.verifyFailures, BackupMetrics.lastPoint,
            BackupMetrics.pointsByLevel,
        ] {
            XCTAssertTrue(queried.contains(name), "the dashboard shows \(name)")
        }
    }

    func testTheNameExtractorSkipsFunctionsLabelsAndGroupings() throws {
        XCTAssertEqual(
            try PromQLNames.metrics(
                in: #"sum by (store, destination) (increase(a_total{outcome="x", b=~"$y"}[1d])) / on(store) group_left(le) b offset 5m"#),
            ["a_total", "b"])
        XCTAssertEqual(try PromQLNames.metrics(in: "time() - max without(instance) (c) > 8 * 86400 and d unless bool e"), ["c", "d", "e"])
        XCTAssertThrowsError(try PromQLNames.metrics(in: "sum(a{b=\"c\""))
    }

    /// Runs the binary so that every metric is written once, and reads the names back.
    func exportedMetricNames() throws -> Set<String> {
        let store = work + "/Stores"
        try StoreFixture.make(at: store, logRows: 50, blobCount: 1)
        let metrics = work + "/storebackup.prom"
        let blocked = work + "/not-a-folder"
        try Data("a file where a folder should be".utf8).write(to: URL(fileURLWithPath: blocked))
        let configuration = work + "/storebackup.yml"
        try """
        state-directory: \(work)/state
        metrics: {file: \(metrics)}
        schedule: daily 02:30
        stores:
          - {name: app, path: \(store), destination: \(work)/backups, verify: {schedule: daily 04:30}}
          - {name: blocked, path: \(store), destination: \(blocked)}
          - {name: points, path: \(store), destination: \(work)/points, incremental: true, levels: on}
        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        func run(_ arguments: [String], expect status: Int32) throws {
            let result = try runStoreBackup(arguments + ["--config", configuration])
            XCTAssertEqual(result.status, status, "\(arguments): \(result.stderr)")
        }
        try run(["create", "--store", "app"], expect: 0)
        try run(["create", "--store", "blocked"], expect: 1)
        try run(["create", "--store", "points"], expect: 0)
        try run(["verify", "--store", "app"], expect: 0)
        let name = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: work + "/backups").first)
        let archive = work + "/backups/" + name
        var bytes = try Data(contentsOf: URL(fileURLWithPath: archive))
        bytes[bytes.count / 2] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: archive))
        try run(["verify", "--store", "app"], expect: 1)

        let text = try String(contentsOfFile: metrics, encoding: .utf8)
        return Set(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line in
                line.split(whereSeparator: { $0 == "{" || $0 == " " }).first.map(String.init)
            })
    }
}

/// The metric names in a PromQL expression: every identifier that is not a function or
/// aggregation (followed by `(`), a keyword, a label in a grouping, inside a label matcher
/// `{…}`, a range `[…]`, a string, a number or a duration.
enum PromQLNames {
    struct Unbalanced: Error { var expression: String }

    /// Operators, and aggregations (which may come before their `by (…)` as well as after).
    static let keywords: Set<String> = [
        "and", "or", "unless", "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "group",
        "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
    ]
    /// Followed by a parenthesised list of labels, not of expressions.
    static let labelLists: Set<String> = ["by", "without", "on", "ignoring", "group_left", "group_right"]

    static func metrics(in expression: String) throws -> [String] {
        let characters = Array(expression)
        var names: [String] = []
        var index = 0
        func isStart(_ c: Character) -> Bool { c.isLetter || c == "_" || c == ":" }
        func isPart(_ c: Character) -> Bool { c.isLetter || c.isNumber || c == "_" || c == ":" }
        func skipSpaces() { while index < characters.count, characters[index].isWhitespace { index += 1 } }
        /// Moves past the bracket that closes the one at `index`, quotes respected.
        func skipGroup(open: Character, close: Character) throws {
            var depth = 0
            var quote: Character?
            while index < characters.count {
                let c = characters[index]
                index += 1
                if let q = quote {
                    if c == "\\" { index += 1 } else if c == q { quote = nil }
                } else if c == "\"" || c == "'" || c == "`" {
                    quote = c
                } else if c == open {
                    depth += 1
                } else if c == close {
                    depth -= 1
                    if depth == 0 { return }
                }
            }
            throw Unbalanced(expression: expression)
        }
        while index < characters.count {
            let c = characters[index]
            if c == "{" { try skipGroup(open: "{", close: "}"); continue }
            if c == "[" { try skipGroup(open: "[", close: "]"); continue }
            if c == "\"" || c == "'" || c == "`" {
                index += 1
                while index < characters.count, characters[index] != c { index += characters[index] == "\\" ? 2 : 1 }
                guard index < characters.count else { throw Unbalanced(expression: expression) }
                index += 1
                continue
            }
            if c.isNumber || (c == "." && index + 1 < characters.count && characters[index + 1].isNumber) {
                // A number or a duration (5m, 1h30m): digits, dots and unit letters together.
                while index < characters.count, characters[index].isNumber || characters[index].isLetter || characters[index] == "." {
                    index += 1
                }
                continue
            }
            if isStart(c) {
                let start = index
                while index < characters.count, isPart(characters[index]) { index += 1 }
                let word = String(characters[start..<index])
                skipSpaces()
                let next = index < characters.count ? characters[index] : " "
                if labelLists.contains(word.lowercased()) {
                    if next == "(" { try skipGroup(open: "(", close: ")") }
                } else if next == "(" || keywords.contains(word.lowercased()) {
                    continue  // a function or aggregation; its arguments are read next
                } else {
                    names.append(word)
                }
                continue
            }
            index += 1
        }
        // Parentheses must balance, or a group above swallowed part of the expression.
        if characters.filter({ $0 == "(" }).count != characters.filter({ $0 == ")" }).count { throw Unbalanced(expression: expression) }
        return names
    }
}
