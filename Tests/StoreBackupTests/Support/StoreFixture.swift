import Crypto
import Foundation
import XCTest

@testable import StoreBackup

/// Builds realistic stores directories and describes trees for comparison.
enum StoreFixture {
    /// A store holding one database with a damaged page (integrity_check fails on it).
    static func makeWithCorruptDatabase(at root: String) throws {
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1] + "/Data.sqlite")
            db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT)"); db.execute("CREATE INDEX tx ON t(x)")
            db.executemany("INSERT INTO t(x) VALUES (?)", [("row %d" % i * 3,) for i in range(3000)])
            db.commit(); db.close()
            with open(sys.argv[1] + "/Data.sqlite", "r+b") as f:
                f.seek(4096 * 5 + 200); f.write(b"\\xff" * 300)
            """
        try runPythonScript(script, [root])
    }

    static let accountCount = 20
    static let startingBalance = 1_000

    /// A WAL database with accounts and an append-only log, a second database in
    /// rollback mode, hidden external data, an empty folder, odd modes and old mtimes.
    static func make(at root: String, logRows: Int = 2_000, blobCount: Int = 12) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: root + "/.App_SUPPORT/_EXTERNAL_DATA", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: root + "/Caches/Empty", withIntermediateDirectories: true)

        let app = try SQLiteConnection(path: root + "/App.sqlite", mode: .create)
        try app.execute(
            """
            PRAGMA journal_mode=WAL;
            CREATE TABLE accounts(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL);
            CREATE TABLE log(id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT NOT NULL);
            CREATE INDEX log_note ON log(note);
            """, operation: "schema")
        try app.execute("BEGIN", operation: "fill")
        for id in 1...accountCount {
            try app.execute("INSERT INTO accounts VALUES(\(id), \(startingBalance))", operation: "fill")
        }
        for row in 0..<logRows {
            try app.execute(
                "INSERT INTO log(note) VALUES('seed row \(row) \(String(repeating: "lorem ipsum ", count: row % 40))')", operation: "fill")
        }
        try app.execute("COMMIT", operation: "fill")
        app.close()

        let settings = try SQLiteConnection(path: root + "/Settings.sqlite", mode: .create)
        try settings.execute("CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT); INSERT INTO kv VALUES('theme','dark');", operation: "settings")
        settings.close()

        var generator = SystemRandomNumberGenerator()
        for index in 0..<blobCount {
            let uuid = UUID().uuidString
            let bytes: [UInt8] =
                index.isMultiple(of: 2)
                ? (0..<(96 << 10)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                : Array(String(repeating: "external blob \(index) ", count: 5000).utf8)
            fm.createFile(atPath: root + "/.App_SUPPORT/_EXTERNAL_DATA/\(uuid)", contents: Data(bytes))
        }
        fm.createFile(atPath: root + "/notes.txt", contents: Data("grocery list\n".utf8))
        fm.createFile(atPath: root + "/.secret-config", contents: Data("token=not-a-real-one\n".utf8))
        chmod(root + "/.secret-config", 0o600)
        chmod(root + "/Caches/Empty", 0o750)
        symlink("notes.txt", root + "/notes-link")
        // Old, odd mtimes (not multiples of two seconds) make time restoration visible.
        setModificationTime(root + "/notes.txt", 1_600_000_001)
        setModificationTime(root + "/Caches/Empty", 1_500_000_003)
        setModificationTime(root + "/.App_SUPPORT", 1_400_000_005)
    }

    static func setModificationTime(_ path: String, _ seconds: Int) {
        var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW)
    }

    struct Node: Equatable, CustomStringConvertible {
        var type: String
        var mode: UInt32
        var mtime: Int
        var digest: String
        var description: String { "\(type) \(String(mode, radix: 8)) \(mtime) \(digest.prefix(12))" }
    }

    /// Every path under `root` (hidden ones too) with type, mode, mtime and content digest.
    /// `includeJournals: false` leaves out SQLite's -wal/-shm files.
    static func describe(_ root: String, includeJournals: Bool = true, includeDatabaseContent: Bool = true) throws -> [String: Node] {
        var result: [String: Node] = [:]
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return result }
        for case let relative as String in enumerator {
            if !includeJournals && (relative.hasSuffix("-wal") || relative.hasSuffix("-shm")) { continue }
            let path = root + "/" + relative
            let info = try FileSystem.lstatInfo(path)
            let type: String
            var digest = ""
            switch info.st_mode & S_IFMT {
            case S_IFDIR: type = "dir"
            case S_IFLNK:
                type = "link"
                digest = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? ""
            default:
                type = "file"
                if includeDatabaseContent || !relative.hasSuffix(".sqlite") {
                    digest = SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: path)))
                        .map { String(format: "%02x", $0) }.joined()
                }
            }
            // A live database's file changes on every checkpoint; compare it by queries instead.
            let isLiveDatabase = !includeDatabaseContent && relative.hasSuffix(".sqlite")
            let mtime = isLiveDatabase ? 0 : Int(info.st_mtim.tv_sec)
            result[relative] = Node(type: type, mode: UInt32(info.st_mode) & 0o7777, mtime: mtime, digest: digest)
        }
        return result
    }

    static func query(_ path: String, _ sql: String) throws -> String {
        let connection = try SQLiteConnection(path: path, mode: .readOnly)
        defer { connection.close() }
        return try connection.scalar(sql, operation: "test query")
    }
}
