import Foundation
import Hummingbird
import Logging
import Metrics
import NIOCore
import Prometheus
import ServiceLifecycle
import StoreBackup

/// A small Hummingbird server that keeps its data in SQLite and embeds storebackup:
/// admin routes for backups, restore without restarting, and nightly backups as a
/// service in the same ServiceGroup as the HTTP server.
@main
struct ServerApp {
    /// The name of this app's one store in the BackupService (it names its state file).
    static let storeName = "app"

    static func main() async throws {
        let options: Options
        do { options = try Options.parse(Array(CommandLine.arguments.dropFirst())) } catch {
            FileHandle.standardError.write(Data("ServerApp: \(error)\n\(Options.usage)\n".utf8))
            exit(2)
        }
        var logger = Logger(label: "ServerApp")
        logger.logLevel = .info

        let helper = StoreHelper(
            storesDirectory: options.storesDirectory,
            destination: try DestinationResolver.resolve(options.destination))
        // Repair a restore that a crash interrupted, before the app opens its store.
        let recovery = try helper.recover()
        if let message = recovery.message { logger.notice("\(message)") }

        let store = try ItemStore(storesDirectory: helper.storesDirectory)
        let swapHold = SwapHold(enabled: ProcessInfo.processInfo.environment["SERVERAPP_TEST_HOLD_SWAP"] == "1")

        // Nightly backups with retention, run by storebackup's BackupService in this process.
        // The admin route's "back up now" goes through it too, so both apply the same
        // retention and record the same state.
        let backupService = BackupService(
            jobs: [
                StoreJob(
                    name: Self.storeName, storesDirectory: helper.storesDirectory, destination: options.destination,
                    schedule: options.schedule, retention: RetentionPolicy(keepLast: options.keepLast))
            ],
            stateStore: BackupStateStore(directory: options.stateDirectory),
            logger: logger)

        // storebackup reports through swift-metrics; with swift-prometheus as the factory, its
        // backups, failures, sizes and last-success time appear on /metrics with no more code.
        let metrics = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics))

        let router = Router()
        router.get("metrics") { _, _ in metrics.emitToString() }
        // Does not touch the store, so it answers during a restore too; the pid lets a test
        // see that a restore did not restart the process.
        router.get("health") { _, _ in Health(status: "ok", pid: Int(getpid())) }
        ItemRoutes(store: store).register(on: router)
        AdminRoutes(
            helper: helper, backupService: backupService, storeName: Self.storeName, store: store,
            swapHold: swapHold, logger: logger
        ).register(on: router)

        let app = Application(
            router: router,
            configuration: .init(address: .hostname(options.host, port: options.port), serverName: "ServerApp"),
            onServerRunning: { channel in
                // Tests start the server on port 0 and read the real port from this line.
                let port = channel.localAddress?.port ?? options.port
                FileHandle.standardOutput.write(Data("ServerApp listening on \(options.host):\(port)\n".utf8))
            },
            logger: logger)

        // One ServiceGroup: SIGTERM/SIGINT stop the HTTP server and the scheduler together (a
        // backup in flight is cancelled and leaves nothing partial).
        let services: [any Service] = [app, backupService]
        let group = ServiceGroup(
            configuration: .init(
                services: services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }
}

struct Health: ResponseEncodable {
    var status: String
    var pid: Int
}

/// Command-line options; see `usage`.
struct Options {
    var storesDirectory = "./data/Stores"
    var destination = "./data/backups"
    var stateDirectory = "./data/state"
    var schedule = Schedule.daily(hour: 3, minute: 0)
    var keepLast = 14
    var host = "127.0.0.1"
    var port = 8080

    static let usage = """
        usage: ServerApp [--stores DIR] [--backups DIR|URL] [--state DIR] [--schedule "daily 03:00"|CRON|"every 6h"]
                         [--keep-last N] [--host ADDRESS] [--port N (0: any free port)]
        """

    struct Invalid: Error, CustomStringConvertible { var description: String }

    static func parse(_ arguments: [String]) throws -> Options {
        var options = Options()
        var rest = arguments[...]
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { throw Invalid(description: "\(flag) needs a value") }
            switch flag {
            case "--stores": options.storesDirectory = value
            case "--backups": options.destination = value
            case "--state": options.stateDirectory = value
            case "--schedule": options.schedule = try Schedule.parse(value)
            case "--keep-last":
                guard let count = Int(value), count > 0 else { throw Invalid(description: "--keep-last needs a positive number") }
                options.keepLast = count
            case "--host": options.host = value
            case "--port":
                guard let port = Int(value), (0...65535).contains(port) else { throw Invalid(description: "bad port \(value)") }
                options.port = port
            default: throw Invalid(description: "unknown option \(flag)")
            }
        }
        return options
    }
}
