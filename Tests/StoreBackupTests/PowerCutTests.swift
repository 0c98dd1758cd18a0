import Foundation
import XCTest

@testable import StoreBackup

/// A power cut during restore and create, at every call that changes a name: a command's
/// file-system calls are recorded (strace), replayed on a model of the store's parent folder
/// (which holds the destination folder too), and at each name change the state a power cut
/// may leave is materialised: every name change up to the cut, in program order; a file's
/// bytes only if it was synced (fsync, fdatasync or syncfs) after its last write, else an
/// empty file.
///
/// - Restore: `recover` must then leave exactly the old store when the cut came before the
///   journal recorded the commit, and exactly the new one after it, and nothing else beside it.
/// - Create: every backup listed must verify, and the next `create --incremental` must make a
///   full or an incremental that verifies.
final class PowerCutTests: XCTestCase {
    var work = ""
    /// The store's parent: the folder a power cut is modelled in.
    var parent: String { work + "/parent" }
    var store: String { parent + "/Stores" }
    var backups: String { parent + "/backups" }
    var journal: String { parent + "/.Stores.storebackup-restore.json" }
    var environment: [String: String] { ["TMPDIR": work + "/tmp"] }
    static let calls =
        "openat,mkdir,mkdirat,write,pwrite64,writev,pwritev,fsync,fdatasync,syncfs,"
        + "rename,renameat,renameat2,unlink,unlinkat,rmdir,symlink,symlinkat,link,linkat"

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("power-cut")
        try FileSystem.createDirectories(work + "/tmp")
        try FileSystem.createDirectories(parent)
    }

    override func tearDownWithError() throws {
        try? FileSystem.removeTree(work)
    }

    func testRecoveryAfterAPowerCutAtEveryNameChangeOfARestore() throws {
        try StoreFixture.make(at: store, logRows: 300, blobCount: 3)
        XCTAssertEqual(try runStoreBackup(["create", store, "--to", backups], environment: environment).status, 0)
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        try replayRestore("latest")
    }

    /// The same for the newest backup of a chain (a full and two incrementals): restore reads
    /// every link, applies the page deltas in `_New`, then swaps.
    func testRecoveryAfterAPowerCutAtEveryNameChangeOfAChainRestore() throws {
        try StoreFixture.make(at: store, logRows: 300, blobCount: 3)
        for night in 0..<3 {
            try Self.changeRows(store, note: "night \(night)")
            let made = try runStoreBackup(["create", store, "--to", backups, "--incremental"], environment: environment)
            XCTAssertEqual(made.status, 0, made.stderr)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: backups).filter(BackupName.isBackup)
        XCTAssertEqual(names.filter(BackupName.isIncremental).count, 2, "\(names)")
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        try Self.changeRows(store, note: "after the backups")
        try replayRestore("latest")
    }

    /// Traces `restore <name>` into the store, then replays a power cut at each name change.
    private func replayRestore(_ name: String, file: StaticString = #filePath, line: UInt = #line) throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else {
            return XCTFail("strace is not installed (scripts/install-deps installs it)")
        }
        let oldTree = try StoreFixture.describe(store, includeJournals: false)
        let initial = work + "/initial"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", parent, initial]).status, 0)

        let trace = work + "/trace.txt"
        let restored = try runTool(
            "/usr/bin/strace",
            [
                "-f", "-y", "-x", "-s", "4096", "-qq", "-o", trace, "-e", "trace=" + Self.calls,
                TestEnvironment.binary, "restore", name, store, "--from", backups, "--yes",
            ],
            environment: environment)
        XCTAssertEqual(restored.status, 0, restored.stderr, file: file, line: line)
        let newTree = try StoreFixture.describe(store, includeJournals: false)
        XCTAssertNotEqual(newTree, oldTree)
        let final = work + "/final"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", parent, final]).status, 0)
        let keptBeside = Set(try FileManager.default.contentsOfDirectory(atPath: parent))

        var model = PowerCutModel(parent: parent, initial: initial)
        let events = SyscallTrace.parse(try String(contentsOfFile: trace, encoding: .utf8))
        let cuts = model.replay(events)
        XCTAssertGreaterThan(cuts.count, 10, "the trace shows the restore's name changes", file: file, line: line)
        XCTAssertTrue(cuts.contains { $0.call.contains("Stores_New") && $0.call.hasPrefix("rename") }, "the swap is among the cuts")
        var outcomes = (old: 0, new: 0)
        var committed = false
        for cut in cuts {
            // The oracle is the journal's protocol: once it records the commit, the restore
            // stands; before that, the old store comes back.
            let phase = Self.journalPhase(cut.state[journal])
            if phase == "committing" || phase == "startingApp" { committed = true }
            let expectNew = committed
            try model.materialise(cut.state, final: final)
            let recovered = try runStoreBackup(["recover", store], environment: environment)
            let label = "power cut after \(cut.call) (journal: \(phase ?? "none"))"
            XCTAssertEqual(recovered.status, 0, "\(label): \(recovered.stderr)", file: file, line: line)
            let tree = try StoreFixture.describe(store, includeJournals: false)
            let expected = expectNew ? newTree : oldTree
            if tree == expected {
                if expectNew { outcomes.new += 1 } else { outcomes.old += 1 }
            } else {
                let differing = Set(tree.keys).union(expected.keys).filter { tree[$0] != expected[$0] }.sorted()
                let first = differing.first ?? ""
                XCTFail(
                    "\(label): not the \(expectNew ? "new" : "old") store (differs in \(differing.prefix(5)); \(first): "
                        + "\(tree[first].map { "\($0)" } ?? "missing") where it should have \(expected[first].map { "\($0)" } ?? "nothing"))",
                    file: file, line: line)
            }
            let left = Set(try FileManager.default.contentsOfDirectory(atPath: parent)).subtracting(keptBeside)
            XCTAssertEqual(left, [], "\(label): left beside the store", file: file, line: line)
        }
        XCTAssertGreaterThan(outcomes.old, 0, "some cuts come before the commit")
        XCTAssertGreaterThan(outcomes.new, 0, "some cuts come after the commit")
        print("PowerCutTests: \(cuts.count) cuts; recovery gave the old store \(outcomes.old) times, the new one \(outcomes.new) times")
    }

    /// The phase a journal file left by a cut records (nil: no journal, or not readable).
    static func journalPhase(_ frozen: PowerCutModel.Frozen?) -> String? {
        guard let frozen, frozen.durable, let data = frozen.written,
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return nil }
        return object["phase"] as? String
    }

    // MARK: create

    func testEveryBackupListedAfterAPowerCutDuringCreateVerifies() throws {
        try replayCreate(incremental: false)
    }

    func testEveryBackupListedAfterAPowerCutDuringAnIncrementalCreateVerifies() throws {
        try replayCreate(incremental: true)
    }

    /// Traces one `create` (after a full and an incremental, with the store changed), then at
    /// each name change: `verify --all` passes, and the next `create --incremental` succeeds
    /// with a backup that verifies.
    private func replayCreate(incremental: Bool, file: StaticString = #filePath, line: UInt = #line) throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else {
            return XCTFail("strace is not installed (scripts/install-deps installs it)")
        }
        try StoreFixture.make(at: store, logRows: 300, blobCount: 3)
        let mode = incremental ? ["--incremental"] : []
        for night in 0..<2 {
            try Self.changeRows(store, note: "night \(night)")
            let made = try runStoreBackup(["create", store, "--to", backups] + mode, environment: environment)
            XCTAssertEqual(made.status, 0, made.stderr, file: file, line: line)
        }
        try "changed after the backups\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)
        // Checkpointed and closed: create writes nothing into the databases, so what a cut
        // can lose is only what create itself writes (the archive, the chain state).
        try Self.changeRows(store, note: "traced night")
        let initial = work + "/initial"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", parent, initial]).status, 0)

        let trace = work + "/trace.txt"
        let traced = try runTool(
            "/usr/bin/strace",
            ["-f", "-y", "-x", "-s", "4096", "-qq", "-o", trace, "-e", "trace=" + Self.calls, TestEnvironment.binary, "create", store]
                + ["--to", backups] + mode,
            environment: environment)
        XCTAssertEqual(traced.status, 0, traced.stderr, file: file, line: line)
        let final = work + "/final"
        XCTAssertEqual(try runTool("/bin/cp", ["-a", parent, final]).status, 0)

        var model = PowerCutModel(parent: parent, initial: initial)
        let cuts = model.replay(SyscallTrace.parse(try String(contentsOfFile: trace, encoding: .utf8)))
        XCTAssertTrue(cuts.contains { $0.call.hasPrefix("rename") && $0.call.contains("backups/") }, "the publish is among the cuts")
        if incremental {
            XCTAssertTrue(
                cuts.contains { $0.call.hasPrefix("rename") && $0.call.hasSuffix("state.json)") }, "the state's update is among the cuts")
        }
        var kinds: [String: Int] = [:]
        for cut in cuts {
            try model.materialise(cut.state, final: final)
            let label = "power cut after \(cut.call)"
            let verified = try runStoreBackup(["verify", "--all", "--from", backups], environment: environment)
            XCTAssertEqual(
                verified.status, 0, "\(label): a listed backup fails: \(verified.stdout) \(verified.stderr)", file: file, line: line)
            let next = try runStoreBackup(["create", store, "--to", backups, "--incremental", "--json"], environment: environment)
            XCTAssertEqual(next.status, 0, "\(label): the next create: \(next.stderr)", file: file, line: line)
            let summary = (try? JSONSerialization.jsonObject(with: Data(next.stdout.utf8))) as? [String: Any]
            let kind = summary?["kind"] as? String ?? "?"
            kinds[kind, default: 0] += 1
            let after = try runStoreBackup(["verify", "--all", "--from", backups], environment: environment)
            XCTAssertEqual(
                after.status, 0, "\(label): after the next create (\(kind)): \(after.stdout) \(after.stderr)", file: file, line: line)
        }
        XCTAssertEqual(Set(kinds.keys).subtracting(["full", "incremental"]), [], "\(kinds)")
        print("PowerCutTests: create\(incremental ? " --incremental" : ""): \(cuts.count) cuts; the next create made \(kinds)")
    }

    /// Rows added to the fixture's WAL database, then a checkpoint that empties the WAL.
    static func changeRows(_ store: String, note: String) throws {
        let app = try SQLiteConnection(path: store + "/App.sqlite", mode: .readWrite)
        try app.execute(
            "INSERT INTO log(note) VALUES('\(note)'); UPDATE accounts SET balance = balance + 1 WHERE id = 3", operation: "test")
        try app.execute("PRAGMA wal_checkpoint(TRUNCATE)", operation: "test")
        app.close()
    }
}

/// The parent folder as the traced calls change it: which path names which file, and
/// whether each file's bytes were synced after its last write.
struct PowerCutModel {
    final class Node {
        enum Kind { case file, folder, link }
        let kind: Kind
        /// Its path in the folder before the restore (it existed then), else nil.
        let original: String?
        /// Its bytes, when every write to it was recorded whole (plain `write`s), in order.
        var written: Data? = Data()
        var lastWrite = -1
        var lastSync = -1
        var linkTarget: String?
        init(kind: Kind, original: String?) { self.kind = kind; self.original = original }
        var synced: Bool { lastWrite <= lastSync }
    }

    /// A node as a cut finds it (nodes keep changing after the cut).
    struct Frozen {
        let node: Node
        /// Its bytes survive: synced after its last write.
        let durable: Bool
        /// The bytes written so far, when every write was recorded whole; nil otherwise or
        /// when nothing was written.
        let written: Data?
    }

    /// What a cut leaves: each path with its node.
    struct Cut {
        var call: String
        var state: [String: Frozen]
    }

    let parent: String
    let initial: String
    private var tree: [String: Node] = [:]
    /// Where each node ended up once the whole restore ran.
    private var finalPath: [ObjectIdentifier: String] = [:]

    init(parent: String, initial: String) {
        self.parent = parent
        self.initial = initial
        let walker = FileManager.default.enumerator(atPath: initial)
        while let relative = walker?.nextObject() as? String {
            guard let info = try? FileSystem.lstatInfo(initial + "/" + relative) else { continue }
            let kind: Node.Kind = info.st_mode & S_IFMT == S_IFDIR ? .folder : (info.st_mode & S_IFMT == S_IFLNK ? .link : .file)
            let node = Node(kind: kind, original: relative)
            node.written = nil
            tree[parent + "/" + relative] = node
        }
    }

    /// Applies the calls in order; returns the state after each one that changed a name.
    mutating func replay(_ events: [SyscallEvent]) -> [Cut] {
        var cuts: [Cut] = []
        let prefix = parent + "/"
        let inside = { (path: String) in path.hasPrefix(prefix) }
        for (index, event) in events.enumerated() where event.succeeded {
            var changed = false
            switch event.name {
            case "openat":
                if let path = event.paths.first, inside(path), event.arguments.contains("O_CREAT"), tree[path] == nil {
                    tree[path] = Node(kind: .file, original: nil)
                    changed = true
                }
            case "mkdir", "mkdirat":
                if let path = event.paths.last, inside(path) { tree[path] = Node(kind: .folder, original: nil); changed = true }
            case "symlink", "symlinkat":
                if let path = event.paths.last, inside(path) {
                    let node = Node(kind: .link, original: nil)
                    node.linkTarget = Self.firstQuoted(event.arguments)
                    tree[path] = node
                    changed = true
                }
            case "link", "linkat":
                let paths = event.paths
                if paths.count == 2, inside(paths[1]), let node = tree[paths[0]] { tree[paths[1]] = node; changed = true }
            case let name where name.hasPrefix("rename"):
                let paths = event.paths
                if paths.count == 2, inside(paths[0]) || inside(paths[1]) {
                    move(paths[0], to: paths[1])
                    changed = true
                }
            case "unlink", "unlinkat", "rmdir":
                if let path = event.paths.first, inside(path) { tree[path] = nil; changed = true }
            case "write", "writev", "pwrite64", "pwritev":
                if let path = event.fdPath, let node = tree[path] {
                    node.lastWrite = index
                    if event.name == "write", let data = Self.writtenData(event.arguments), node.written != nil {
                        node.written!.append(data)
                    } else {
                        node.written = nil
                    }
                }
            case "fsync", "fdatasync":
                if let path = event.fdPath, let node = tree[path] { node.lastSync = index }
            case "syncfs":
                for node in tree.values { node.lastSync = index }
            default:
                break
            }
            if changed {
                cuts.append(
                    Cut(
                        call:
                            "\(event.name)(\(event.paths.map { $0.replacingOccurrences(of: parent + "/", with: "") }.joined(separator: " -> ")))",
                        state: tree.mapValues { Frozen(node: $0, durable: $0.synced, written: $0.lastWrite >= 0 ? $0.written : nil) }))
            }
        }
        for (path, node) in tree { finalPath[ObjectIdentifier(node)] = path }
        return cuts
    }

    /// Moves `source` and everything beneath it to `target` (replacing what was there).
    private mutating func move(_ source: String, to target: String) {
        for path in tree.keys where path == target || path.hasPrefix(target + "/") { tree[path] = nil }
        for (path, node) in tree where path == source || path.hasPrefix(source + "/") {
            tree[path] = nil
            tree[target + path.dropFirst(source.count)] = node
        }
    }

    /// Writes the cut's state into the parent folder: names as the cut left them, a file's
    /// bytes only when durable (from the recorded writes, else from where the file was
    /// before or after the restore), modes and times from there too.
    func materialise(_ state: [String: Frozen], final: String) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: parent) { try FileSystem.removeTree(parent + "/" + name) }
        var folders: [(String, String?)] = []
        for path in state.keys.sorted() {
            let frozen = state[path]!
            let node = frozen.node
            let source =
                node.original.map { initial + "/" + $0 }
                ?? finalPath[ObjectIdentifier(node)].map { final + $0.dropFirst(parent.count) }
            switch node.kind {
            case .folder:
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                folders.append((path, source))
            case .link:
                let target = try node.linkTarget ?? FileManager.default.destinationOfSymbolicLink(atPath: source ?? "")
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
                if let source { Self.copyModeAndTime(from: source, to: path) }
            case .file:
                var bytes = Data()
                if frozen.durable {
                    if let written = frozen.written {
                        bytes = written
                    } else if let source {
                        bytes = FileManager.default.contents(atPath: source) ?? Data()
                    }
                }
                try bytes.write(to: URL(fileURLWithPath: path))
                if let source { Self.copyModeAndTime(from: source, to: path) }
            }
        }
        for (path, source) in folders.reversed() { if let source { Self.copyModeAndTime(from: source, to: path) } }
    }

    private static func copyModeAndTime(from source: String, to target: String) {
        guard let info = try? FileSystem.lstatInfo(source) else { return }
        let isLink = info.st_mode & S_IFMT == S_IFLNK
        if !isLink { chmod(target, info.st_mode & 0o7777) }
        var times = [info.st_atim, info.st_mtim]
        utimensat(AT_FDCWD, target, &times, isLink ? AT_SYMLINK_NOFOLLOW : 0)
    }

    /// The first quoted argument, unescaped (a link's target).
    static func firstQuoted(_ arguments: String) -> String? {
        guard let start = arguments.firstIndex(of: "\"") else { return nil }
        return unescape(arguments[arguments.index(after: start)...]).map { String(decoding: $0.bytes, as: UTF8.self) }
    }

    /// The bytes of a `write(fd, "…", n)`, or nil when strace cut them short (`"…"...`).
    static func writtenData(_ arguments: String) -> Data? {
        guard let start = arguments.range(of: ", \"") else { return nil }
        guard let (bytes, rest) = unescape(arguments[start.upperBound...]), !rest.hasPrefix("...") else { return nil }
        return Data(bytes)
    }

    /// A C string strace printed (with -x), up to its closing quote: its bytes and what follows.
    static func unescape(_ text: Substring) -> (bytes: [UInt8], rest: Substring)? {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if character == "\"" { return (bytes, text[text.index(after: index)...]) }
            if character == "\\" {
                let next = text.index(after: index)
                guard next < text.endIndex else { return nil }
                switch text[next] {
                case "n": bytes.append(0x0A)
                case "t": bytes.append(0x09)
                case "r": bytes.append(0x0D)
                case "v": bytes.append(0x0B)
                case "f": bytes.append(0x0C)
                case "x":
                    let hex = text[text.index(next, offsetBy: 1)..<text.index(next, offsetBy: 3)]
                    bytes.append(UInt8(hex, radix: 16) ?? 0)
                    index = text.index(next, offsetBy: 3)
                    continue
                default: bytes.append(contentsOf: Array(String(text[next]).utf8))
                }
                index = text.index(after: next)
                continue
            }
            bytes.append(contentsOf: Array(String(character).utf8))
            index = text.index(after: index)
        }
        return nil
    }
}
