// swift-tools-version:6.0
import PackageDescription

// Linux only: the library relies on syncfs, openat2, SCHED_BATCH and /proc, which other
// systems lack, so no Apple platform is declared.
let package = Package(
    name: "storebackup",
    products: [
        .library(name: "StoreBackup", targets: ["StoreBackup"]),
        .executable(name: "storebackup", targets: ["storebackup"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        // 1.16: LogHandler.log(event:), which the command line's and the tests' handlers implement.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        // Only for `swift package generate-documentation` (DocC); not linked into anything.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
    ],
    targets: [
        // System libraries, found by pkg-config; the header shims hold static inline
        // helpers where Swift cannot call the C API directly (variadic or function-pointer tables).
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CZip", pkgConfig: "libzip",
            providers: [.apt(["libzip-dev", "zlib1g-dev"])]),
        .systemLibrary(
            name: "CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        // libcrypto (OpenSSL) for WinZip AES: swift-crypto has no multi-block AES-ECB, and its
        // AES._CTR counts big-endian while WinZip's counter is little-endian.
        .systemLibrary(
            name: "COpenSSL", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),
        // Intel ISA-L: deflate, inflate and CRC-32 for the block pipeline (several times zlib's speed).
        .systemLibrary(
            name: "CISAL", pkgConfig: "libisal",
            providers: [.apt(["libisal-dev"])]),
        // Header-only shim for Linux calls Swift cannot reach (variadic syscall()).
        .systemLibrary(name: "CPosix"),
        // A SQLite VFS whose reads wait for a file restore is still writing, so a database's
        // integrity check runs beside its unpacking (C: a VFS is a table of C function pointers).
        .target(name: "CUnpackingFile", dependencies: ["CSQLite"]),
        // The read-only VFS through which SQLite reads a database inside a backup, block by
        // block (`storebackup sql`, ``BackupDatabase``).
        .target(name: "CBackupVFS", dependencies: ["CSQLite"]),
        .target(
            name: "StoreBackup",
            dependencies: [
                "CSQLite", "CZip", "CCurl", "CPosix", "COpenSSL", "CISAL", "CUnpackingFile", "CBackupVFS",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]),
        .executableTarget(
            name: "storebackup",
            dependencies: [
                "StoreBackup", "CPosix",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]),
        // The public API as an app sees it: `import StoreBackup` only, no @testable.
        .testTarget(
            name: "PublicAPITests",
            dependencies: ["StoreBackup", .product(name: "Logging", package: "swift-log")]),
        .testTarget(
            name: "StoreBackupTests",
            dependencies: [
                "StoreBackup", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            resources: [.copy("Fixtures")]),
    ],
    swiftLanguageModes: [.v6]
)
