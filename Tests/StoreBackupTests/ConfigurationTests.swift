import Foundation
import XCTest

@testable import StoreBackup

final class ConfigurationTests: XCTestCase {
    func parse(_ yaml: String, environment: [String: String] = [:]) throws -> BackupConfiguration {
        try BackupConfiguration.parse(yaml: yaml, file: "/etc/test.yml", environment: environment)
    }

    func error(_ yaml: String, environment: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line)
        -> ConfigurationProblem?
    {
        do {
            _ = try parse(yaml, environment: environment)
            XCTFail("expected an error", file: file, line: line)
            return nil
        } catch StoreBackupError.invalidConfiguration(let problem) {
            return problem
        } catch {
            XCTFail("unexpected \(error)", file: file, line: line)
            return nil
        }
    }

    func testTheIssueExampleAndDefaults() throws {
        let configuration = try parse(
            """
            schedule: every 6h
            retention: {keep-last: 3}
            stores:
              - name: app
                path: /var/lib/app/Stores
                destination: s3://bucket/app      # any destination URL or a local path
                schedule: daily 02:30
                jitter: 10m
                retention: {keep-daily: 7, keep-weekly: 4}
                encrypt: {password-file: /etc/storebackup.pass}
              - name: second
                path: /srv/second/Stores
                level: best
            hooks:
              on-failure: {url: "https://example.test/alert"}
              on-success:
                - {command: "touch /tmp/ok", timeout: 5s}
            """)
        XCTAssertEqual(configuration.stores.count, 2)
        let app = configuration.stores[0]
        XCTAssertEqual(app.name, "app")
        XCTAssertEqual(app.storesDirectory, "/var/lib/app/Stores")
        XCTAssertEqual(app.destination, "s3://bucket/app")
        XCTAssertEqual(app.schedule, .daily(hour: 2, minute: 30))
        XCTAssertEqual(app.jitter, 600)
        XCTAssertEqual(app.retention, RetentionPolicy(keepDaily: 7, keepWeekly: 4))
        XCTAssertEqual(app.passwordFile, "/etc/storebackup.pass")
        XCTAssertEqual(app.hooks.onFailure, [HookAction(.url("https://example.test/alert"))])
        XCTAssertEqual(app.hooks.onSuccess, [HookAction(.command("touch /tmp/ok"), timeout: 5)])
        let second = configuration.stores[1]
        XCTAssertNil(second.destination)
        XCTAssertEqual(second.schedule, .every(seconds: 21_600), "top-level default")
        XCTAssertEqual(second.retention, RetentionPolicy(keepLast: 3))
        XCTAssertEqual(second.compressionLevel, CompressionLevel.best)
    }

    func testEnvironmentReferences() throws {
        let configuration = try parse(
            """
            stores:
              - name: app
                path: ${APP_HOME}/Stores
                destination: "s3://${BUCKET}/app"
                schedule: daily 01:00
            """, environment: ["APP_HOME": "/srv/app", "BUCKET": "my-bucket"])
        XCTAssertEqual(configuration.stores[0].storesDirectory, "/srv/app/Stores")
        XCTAssertEqual(configuration.stores[0].destination, "s3://my-bucket/app")

        let missing = error(
            """
            stores:
              - name: app
                path: /srv/app/Stores
                destination: "s3://${NO_SUCH_VARIABLE}/app"
                schedule: daily 01:00
            """)
        XCTAssertEqual(missing?.line, 4)
        XCTAssertEqual(missing?.key, "stores[0].destination")
        XCTAssertTrue(missing?.message.contains("NO_SUCH_VARIABLE") ?? false)
    }

    func testErrorsNameFileLineAndKey() throws {
        let badSchedule = error(
            """
            stores:
              - name: app
                path: /srv/app/Stores

                schedule: daily 25:61
            """)
        XCTAssertEqual(badSchedule?.description.hasPrefix("/etc/test.yml:5: stores[0].schedule: "), true, badSchedule?.description ?? "")

        let unknownKey = error(
            """
            stores:
              - name: app
                path: /srv/app/Stores
                schedule: daily 01:00
                retension: {keep-daily: 7}
            """)
        XCTAssertEqual(unknownKey?.line, 5)
        XCTAssertEqual(unknownKey?.key, "stores[0].retension")
        XCTAssertTrue(unknownKey?.message.contains("unknown key") ?? false)

        let badCount = error(
            """
            schedule: every 1h
            stores:
              - name: app
                path: /srv/app/Stores
                retention:
                  keep-daily: seven
            """)
        XCTAssertEqual(badCount?.line, 6)
        XCTAssertEqual(badCount?.key, "stores[0].retention.keep-daily")

        let syntax = error(
            """
            stores:
              - name: app
                path: [unclosed
            """)
        XCTAssertEqual(syntax?.file, "/etc/test.yml")
        XCTAssertNotNil(syntax?.line)
        XCTAssertTrue(syntax?.message.contains("invalid YAML") ?? false)

        let duplicate = error(
            """
            schedule: every 1h
            stores:
              - {name: app, path: /a}
              - {name: app, path: /b}
            """)
        XCTAssertEqual(duplicate?.line, 4)
        XCTAssertEqual(duplicate?.key, "stores[1].name")

        XCTAssertEqual(error("stores: []")?.key, "stores")
        XCTAssertEqual(error("schedule: every 1h\nstores:\n  - {name: ../x, path: /a}")?.key, "stores[0].name")
        XCTAssertEqual(error("stores:\n  - {name: a, path: /a}")?.key, "stores[0].schedule")
        XCTAssertEqual(
            error("schedule: every 1h\nstores:\n  - {name: a, path: /a, hooks: {on-success: {url: ftp://x}}}")?.key,
            "stores[0].hooks.on-success.url")
    }

    func testThreadsPerStoreOrAsDefault() throws {
        let configuration = try parse(
            """
            schedule: every 6h
            threads: 2
            stores:
              - {name: app, path: /srv/app/Stores, threads: 1}
              - {name: wiki, path: /srv/wiki/Stores}
            """)
        XCTAssertEqual(configuration.stores.map(\.threads), [1, 2])
        XCTAssertNil(try parse("schedule: every 1h\nstores:\n  - {name: a, path: /a}").stores[0].threads)
        for bad in ["0", "17", "all", "-1"] {
            let problem = error("schedule: every 1h\nstores:\n  - {name: a, path: /a, threads: \(bad)}")
            XCTAssertEqual(problem?.key, "stores[0].threads", bad)
            XCTAssertTrue(problem?.message.contains("from 1 to 16") ?? false, problem?.message ?? "")
        }
    }

    func testMissingFileIsAClearError() {
        XCTAssertThrowsError(try BackupConfiguration.load(path: "/nonexistent/storebackup.yml")) { error in
            XCTAssertEqual((error as? StoreBackupError)?.description, "/nonexistent/storebackup.yml: configuration file does not exist")
        }
    }
}
