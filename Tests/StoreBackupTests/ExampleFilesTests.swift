import Foundation
import XCTest
@testable import StoreBackup

/// Examples/nightly: every file is parsed by what would read it.
final class ExampleFilesTests: XCTestCase {
    let folder = TestEnvironment.packageRoot + "/Examples/nightly"

    func testSampleConfigurationLoads() throws {
        let configuration = try BackupConfiguration.load(path: folder + "/storebackup.yml")
        XCTAssertEqual(configuration.stores.map(\.name), ["app", "wiki"])
        XCTAssertEqual(configuration.stores[0].schedule.description, "30 2 * * *")
        XCTAssertEqual(configuration.stores[1].schedule, .every(seconds: 21_600))
        XCTAssertEqual(configuration.stores[1].destination, "/var/backups/storebackup")
        XCTAssertNotNil(configuration.stores[1].retention?.keepWithin)
        XCTAssertEqual(configuration.stores[0].hooks.onFailure.count, 2)
        XCTAssertEqual(configuration.stateDirectory, "/var/lib/storebackup")
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
        // The command is one our CLI accepts: check its arguments parse (--help exits 0 on a valid prefix).
        XCTAssertTrue(fields[5].contains("storebackup create --config /etc/storebackup.yml --store app --prune"))
        let check = try runStoreBackup(["create", "--config", folder + "/storebackup.yml", "--store", "app", "--prune", "--help"])
        XCTAssertEqual(check.status, 0, check.stderr)
    }

    func testSystemdUnitsAreWellFormed() throws {
        let units = ["storebackup.service", "storebackup-oneshot.service", "storebackup-oneshot.timer"]
        let known: [String: Set<String>] = [
            "Unit": ["Description", "Documentation", "Wants", "After", "Requires"],
            "Service": ["Type", "ExecStart", "KillSignal", "TimeoutStopSec", "Restart", "RestartSec", "StateDirectory",
                        "Environment", "ProtectSystem", "ReadWritePaths", "PrivateTmp", "NoNewPrivileges"],
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
                XCTAssertTrue(known[section]?.contains(parts[0]) ?? false, "\(unit):\(number + 1): unexpected key \(parts[0]) in [\(section)]")
                keys[section, default: [:]][parts[0]] = parts[1]
            }
            if unit.hasSuffix(".service") {
                let exec = try XCTUnwrap(keys["Service"]?["ExecStart"], unit)
                XCTAssertTrue(exec.hasPrefix("/"), "ExecStart needs an absolute path")
                // The arguments after the binary are accepted by our CLI.
                let arguments = exec.split(separator: " ").dropFirst().map(String.init).map {
                    $0 == "/etc/storebackup.yml" ? self.folder + "/storebackup.yml" : $0
                }
                let check = try runStoreBackup(arguments + ["--help"])
                XCTAssertEqual(check.status, 0, "\(unit): \(check.stderr)")
            } else {
                XCTAssertEqual(keys["Timer"]?["OnCalendar"], "*-*-* 02:30:00")
            }
        }
        // scripts/install-deps installs systemd: a missing systemd-analyze is a broken setup, not a pass.
        guard let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            return XCTFail("systemd-analyze is missing (scripts/install-deps installs systemd)")
        }
        let result = try runTool(analyze, ["verify", "--man=no"] + units.map { folder + "/" + $0 })
        // Only the missing binary may be reported on a machine without storebackup installed.
        let problems = result.stderr.split(separator: "\n").filter { !$0.contains("/usr/local/bin/storebackup") }
        XCTAssertTrue(problems.isEmpty, result.stderr)
    }
}
