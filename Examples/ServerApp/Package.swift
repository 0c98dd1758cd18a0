// swift-tools-version:6.0
import PackageDescription

// An example server that embeds StoreBackup: data in SQLite (WAL), admin routes for
// backups, restore without restarting, and the nightly BackupService in its ServiceGroup.
let package = Package(
    name: "ServerApp",
    platforms: [.macOS(.v14)],
    dependencies: [
        // The storebackup package at the root of this repository.
        .package(name: "storebackup", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
    ],
    targets: [
        // The example's own view of the system SQLite (the library keeps its C module internal).
        .systemLibrary(
            name: "CSQLiteServer", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        .executableTarget(
            name: "ServerApp",
            dependencies: [
                "CSQLiteServer",
                .product(name: "StoreBackup", package: "storebackup"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
