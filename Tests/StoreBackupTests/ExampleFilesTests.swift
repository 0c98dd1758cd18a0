import Foundation
import XCTest

@testable import StoreBackup

/// Examples/nightly: every file is parsed by what would read it.
final class ExampleFilesTests: XCTestCase {
    let folder = TestEnvironment.packageRoot + "/Examples/nightly"

    func testSampleConfigurationLoads() throws {
        let configuration = try BackupConfiguration.load(path: folder + "/storebackup.yml")
        XCTAssertEqual(configuration.stores.map(\.name), ["app", "wiki", "ledger"])
        XCTAssertEqual(configuration.stores[0].schedule.description, "30 2 * * *")
        XCTAssertEqual(configuration.stores[1].schedule, .every(seconds: 21_600))
        XCTAssertEqual(configuration.stores[1].destination, "/var/backups/storebackup")
        XCTAssertNotNil(configuration.stores[1].retention?.keepWithin)
        XCTAssertEqual(configuration.stores[0].hooks.onFailure.count, 2)
        XCTAssertEqual(configuration.stateDirectory, "/var/lib/storebackup")
        XCTAssertEqual(configuration.stores[0].verify?.pick, .rotate)
        XCTAssertNil(configuration.stores[1].verify)
        XCTAssertTrue(configuration.stores.allSatisfy(\.verifyAfterCreate))
        XCTAssertEqual(configuration.stores[2].levels, PointLevelPolicy(), "points kept by level")
        XCTAssertEqual(configuration.stores[2].appliedRetention?.keepDaily, 7, "the default retention beside the levels")
    }

    func testCrontabLineIsAValidScheduleAndCommand() throws {
        let text = try String(contentsOfFile: folder + "/crontab", encoding: .utf8)
        let lines = text.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        XCTAssertEqual(lines.count, 1)
        let fields = lines[0].split(separator: " ", maxSplits: 5).map(String.init)
        let cron = try CronExpression(fields[0..<5].joined(separator: " "))
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "UTC")!
        let next = cron.nextFire(after: Date(timeIntervalSince1970: 0), calendar: utc)
        XCTAssertEqual(utc.dateComponents([.hour, .minute], from: next), DateComponents(hour: 2, minute: 30))
        // The command is one our CLI accepts: its argv, parsed and validated by the real parser.
        let command = fields[5].split(separator: " ").prefix { !$0.hasPrefix(">") }.map(String.init)
        XCTAssertEqual(command.first, "/usr/local/bin/storebackup")
        try assertParses(Array(command.dropFirst()), "crontab")
    }

    /// The real command line takes `arguments`: with the configuration swapped for a file
    /// that does not exist, it parses and validates them (a refusal exits 64, EX_USAGE),
    /// then stops at the missing file, before doing anything.
    func assertParses(_ arguments: [String], _ source: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let missing = NSTemporaryDirectory() + "storebackup-no-such-config-\(UUID().uuidString).yml"
        XCTAssertTrue(arguments.contains("/etc/storebackup.yml"), "\(source): \(arguments)", file: file, line: line)
        let result = try runStoreBackup(arguments.map { $0 == "/etc/storebackup.yml" ? missing : $0 })
        XCTAssertEqual(result.status, 1, "\(source): \(arguments): \(result.stderr)", file: file, line: line)
        XCTAssertTrue(
            result.stderr.contains(missing), "\(source): stopped at the missing configuration: \(result.stderr)", file: file, line: line)
    }

    /// Wrong arguments exit 64 before any configuration is read, so a pass above means something.
    func testWrongArgumentsAreRefusedBeforeTheConfiguration() throws {
        let missing = NSTemporaryDirectory() + "storebackup-no-such-config-\(UUID().uuidString).yml"
        for wrong in [
            ["create", "--config", missing, "--stor", "app"], ["run", "--config", missing, "--prune"],
            ["create", "--config", missing, "--store", "app", "--level", "11"], ["backup", "--config", missing],
        ] {
            let result = try runStoreBackup(wrong)
            XCTAssertEqual(result.status, 64, "\(wrong): \(result.stderr)")
        }
    }

    func testSystemdUnitsAreWellFormed() throws {
        let units = ["storebackup.service", "storebackup-oneshot.service", "storebackup-oneshot.timer"]
        let known: [String: Set<String>] = [
            "Unit": ["Description", "Documentation", "Wants", "After", "Requires"],
            "Service": [
                "Type", "ExecStart", "KillSignal", "TimeoutStopSec", "Restart", "RestartSec", "StateDirectory",
                "Environment", "ProtectSystem", "ReadWritePaths", "PrivateTmp", "NoNewPrivileges", "CPUWeight",
            ],
            "Timer": ["OnCalendar", "RandomizedDelaySec", "Persistent"],
            "Install": ["WantedBy"],
        ]
        for unit in units {
            let text = try String(contentsOfFile: folder + "/" + unit, encoding: .utf8)
            var section: String?
            var keys: [String: [String: String]] = [:]
            for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = raw.trimmingCharacters(in: .whitespaces)
                if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
                if line.hasPrefix("[") {
                    XCTAssertTrue(line.hasSuffix("]"), "\(unit):\(number + 1)")
                    section = String(line.dropFirst().dropLast())
                    XCTAssertNotNil(known[section!], "\(unit):\(number + 1): unknown section \(line)")
                    continue
                }
                let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
                XCTAssertEqual(parts.count, 2, "\(unit):\(number + 1): not key=value")
                guard let section, parts.count == 2 else { XCTFail("\(unit):\(number + 1): key outside a section"); continue }
                XCTAssertTrue(
                    known[section]?.contains(parts[0]) ?? false, "\(unit):\(number + 1): unexpected key \(parts[0]) in [\(section)]")
                keys[section, default: [:]][parts[0]] = parts[1]
            }
            if unit.hasSuffix(".service") {
                let exec = try XCTUnwrap(keys["Service"]?["ExecStart"], unit)
                XCTAssertTrue(exec.hasPrefix("/"), "ExecStart needs an absolute path")
                // The arguments after the binary are accepted by our CLI.
                try assertParses(exec.split(separator: " ").dropFirst().map(String.init), unit)
            } else {
                XCTAssertEqual(keys["Timer"]?["OnCalendar"], "*-*-* 02:30:00")
            }
        }
        // scripts/install-deps installs systemd: a missing systemd-analyze is a broken setup, not a pass.
        guard
            let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first(where: FileManager.default.isExecutableFile(atPath:))
        else {
            return XCTFail("systemd-analyze is missing (scripts/install-deps installs systemd)")
        }
        let result = try runTool(analyze, ["verify", "--man=no"] + units.map { folder + "/" + $0 })
        // Only the missing binary may be reported on a machine without storebackup installed.
        let problems = result.stderr.split(separator: "\n").filter { !$0.contains("/usr/local/bin/storebackup") }
        XCTAssertTrue(problems.isEmpty, result.stderr)
    }
}
