import Foundation
import XCTest

@testable import StoreBackup

/// Power-loss ordering of restore, proved from the system calls it makes (strace), and the
/// pieces that keep temporaries findable: the durable write and the scratch sweep.
final class DurabilityTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("durability")
    }

    override func tearDownWithError() throws {
        try? FileSystem.removeTree(work)
    }

    /// Every unpacked file is on disk before the journal records the swap, and `_Old` is
    /// removed only after the swap's renames are synced.
    func testRestoreSyncsEverythingBeforeTheSwapRecordAndRemovesOldOnlyAfterTheSwapIsSynced() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else {
            throw XCTSkip("strace is not installed (scripts/install-deps installs it)")
        }
        try StoreFixture.make(at: store)
        XCTAssertEqual(try runStoreBackup(["create", store, "--to", backups]).status, 0)
        try "changed after the backup\n".write(toFile: store + "/notes.txt", atomically: false, encoding: .utf8)

        let trace = work + "/trace.txt"
        let calls =
            "openat,mkdir,mkdirat,write,pwrite64,fchmod,fchmodat,utimensat,symlink,symlinkat,fsync,fdatasync,syncfs,"
            + "rename,renameat,renameat2,unlink,unlinkat,rmdir"
        let result = try runTool(
            "/usr/bin/strace",
            [
                "-f", "-y", "-qq", "-o", trace, "-e", "trace=" + calls,
                TestEnvironment.binary, "restore", "latest", store, "--from", backups, "--yes",
            ])
        XCTAssertEqual(result.status, 0, result.stderr)
        let events = SyscallTrace.parse(try String(contentsOfFile: trace, encoding: .utf8))
        let layout = StoreLayout(storesDirectory: store)

        // The swap: live → _Old, _New → live, and the journal record written just before.
        let toOld = try XCTUnwrap(events.firstIndex { $0.isRename(from: layout.live, to: layout.old) }, "no rename to _Old")
        let toLive = try XCTUnwrap(events.firstIndex { $0.isRename(from: layout.new, to: layout.live) }, "no rename of _New")
        XCTAssertLessThan(toOld, toLive)
        let swapRecord = try XCTUnwrap(events[..<toOld].lastIndex { $0.isRename(to: layout.journal) }, "no journal record before the swap")

        // Everything written under _New before the swap record is synced between its last write and that record.
        let newPrefix = layout.new + "/"
        let touching = events[..<swapRecord].indices.filter {
            events[$0].name != "fsync" && events[$0].name != "fdatasync"
                && events[$0].name != "syncfs" && events[$0].mentions(newPrefix)
        }
        let lastTouch = try XCTUnwrap(touching.last, "the trace shows no extraction into _New")
        let syncfsAfter = events[lastTouch..<swapRecord].contains { $0.name == "syncfs" && $0.succeeded && $0.mentions(layout.new) }
        if !syncfsAfter {
            // Without syncfs, every extracted file and folder needs its own fsync after its last write.
            let restored = try FileManager.default.subpathsOfDirectory(atPath: store).filter {
                (try? FileSystem.lstatInfo(store + "/" + $0)).map { ($0.st_mode & S_IFMT) != S_IFLNK } ?? false
            }
            XCTAssertFalse(restored.isEmpty)
            for relative in restored + [""] {
                let path = relative.isEmpty ? layout.new : newPrefix + relative
                let lastWrite = touching.last { events[$0].mentions(path) } ?? 0
                XCTAssertTrue(
                    events[lastWrite..<swapRecord].contains { ($0.name == "fsync" || $0.name == "fdatasync") && $0.fdPath == path },
                    "\(relative.isEmpty ? "_New" : relative) is not synced before the swap record")
            }
        }

        // _Old is kept (renamed to _Replaced) or goes only after the renames are synced (fsync of
        // the parent) and the commit is journaled.
        let firstRemoval = try XCTUnwrap(
            events.firstIndex { ($0.isRemoval && $0.mentions(layout.old)) || $0.isRename(from: layout.old, to: layout.replaced) },
            "_Old was never kept or removed")
        XCTAssertTrue(
            events[toLive..<firstRemoval].contains { $0.name == "fsync" && $0.succeeded && $0.fdPath == layout.parent },
            "the swap is not synced before _Old is removed")
        XCTAssertTrue(
            events[toLive..<firstRemoval].contains { $0.isRename(to: layout.journal) },
            "the commit is not journaled before _Old is removed")
    }

    func testDurableWriteReplacesAndLeavesNoTemporary() throws {
        let target = work + "/state.json"
        try DurableFile.write(Data("one".utf8), to: target)
        try DurableFile.write(Data("two".utf8), to: target, mode: 0o640)
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "two")
        XCTAssertEqual(try FileSystem.lstatInfo(target).st_mode & 0o777, 0o640)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work), ["state.json"])
    }

    /// Credentials go through the same durable write: 0600, no temporary left behind.
    func testCredentialsFileIsWrittenDurablyForTheOwnerOnly() throws {
        let path = work + "/config/credentials"
        try CredentialsFile.update(path, values: [("STOREBACKUP_DROPBOX_TOKEN", "one")])
        try CredentialsFile.update(path, values: [("STOREBACKUP_DROPBOX_TOKEN", "two")])
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), "STOREBACKUP_DROPBOX_TOKEN=two\n")
        XCTAssertEqual(try FileSystem.lstatInfo(path).st_mode & 0o777, 0o600)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work + "/config"), ["credentials"])
    }

    /// Temporaries of a dead owner go, SQLite companions and folders included; a live
    /// owner's and foreign files stay.
    func testSweepRemovesOnlyDeadOwnersTemporaries() throws {
        let dead = try deadPid()
        let names = [
            ".storebackup-tmp-\(dead)-snapshot-abc.sqlite", ".storebackup-tmp-\(dead)-snapshot-abc.sqlite-journal",
            ".storebackup-tmp-\(dead)-snapshot-abc.sqlite-wal", ".storebackup-tmp-\(dead)-archive-x.zip",
            ".Stores.storebackup-download-\(dead).zip",
        ]
        for name in names { FileManager.default.createFile(atPath: work + "/" + name, contents: Data("x".utf8)) }
        try FileSystem.createDirectories(work + "/storebackup-verify-\(dead)-1a2b/store")
        let mine = ScratchFiles.path(in: work, purpose: "archive", suffix: ".zip")
        FileManager.default.createFile(atPath: mine, contents: nil)
        FileManager.default.createFile(atPath: work + "/.storebackup-tmp-notapid", contents: nil)
        FileManager.default.createFile(atPath: work + "/Stores.zip", contents: nil)

        let removed = ScratchFiles.sweep(work)
        XCTAssertEqual(Set(removed), Set(names + ["storebackup-verify-\(dead)-1a2b"]))
        XCTAssertEqual(
            Set(try FileManager.default.contentsOfDirectory(atPath: work)),
            [FileSystem.lastComponent(of: mine), ".storebackup-tmp-notapid", "Stores.zip"])
    }

    /// The pid of a process that has exited (and been reaped).
    private func deadPid() throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/true")
        try process.run()
        process.waitUntilExit()
        return process.processIdentifier
    }
}

/// One system call from an `strace -f -y` log, in the order the calls finished.
struct SyscallEvent {
    var name: String
    /// The text between the parentheses, with `-y` paths (`5</a/b>`) left in.
    var arguments: String
    var result: String

    var succeeded: Bool { !result.hasPrefix("-1") }
    /// The path of the first argument when it is a descriptor (`fsync(5</a/b>)` → `/a/b`).
    var fdPath: String? {
        guard let open = arguments.firstIndex(of: "<"), arguments[..<open].allSatisfy(\.isNumber),
            let close = arguments[open...].firstIndex(of: ">")
        else { return nil }
        return String(arguments[arguments.index(after: open)..<close])
    }
    /// The quoted path arguments, joined to their directory descriptor's path when relative.
    var paths: [String] {
        var result: [String] = []
        var lastDirectory: String?
        for part in arguments.components(separatedBy: ", ") {
            if let open = part.firstIndex(of: "<"), part.hasSuffix(">") {
                lastDirectory = String(part[part.index(after: open)..<part.index(before: part.endIndex)])
            } else if part.hasPrefix("\"") && part.hasSuffix("\"") && part.count >= 2 {
                let path = String(part.dropFirst().dropLast())
                result.append(path.hasPrefix("/") ? path : (lastDirectory ?? "") + "/" + path)
                lastDirectory = nil
            }
        }
        return result
    }
    var isRemoval: Bool { (name == "unlink" || name == "unlinkat" || name == "rmdir") && succeeded }

    func isRename(from source: String? = nil, to target: String) -> Bool {
        guard name.hasPrefix("rename"), succeeded else { return false }
        let paths = self.paths
        guard paths.count == 2, paths[1] == target else { return false }
        return source == nil || paths[0] == source
    }

    /// True when the call names `text` in a path argument, a descriptor or its result.
    func mentions(_ text: String) -> Bool {
        arguments.contains(text) || result.contains(text)
    }
}

enum SyscallTrace {
    /// Parses `pid name(args) = result` lines, joining `<unfinished ...>` / `<... resumed>` pairs.
    static func parse(_ log: String) -> [SyscallEvent] {
        var pending: [Substring: (name: String, arguments: String)] = [:]
        var events: [SyscallEvent] = []
        for line in log.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            let pid = line[..<space]
            let body = line[line.index(after: space)...].trimmingCharacters(in: .whitespaces)
            if body.hasSuffix("<unfinished ...>"), let open = body.firstIndex(of: "(") {
                let arguments = body[body.index(after: open)...].dropLast("<unfinished ...>".count)
                pending[pid] = (String(body[..<open]), String(arguments).trimmingCharacters(in: .whitespaces))
            } else if body.hasPrefix("<... "), let start = pending.removeValue(forKey: pid),
                let resumed = body.range(of: "resumed>")
            {
                let rest = String(body[resumed.upperBound...])
                // strace pads a resumed call's result: `<... openat resumed>)             = 14`.
                guard let equals = rest.range(of: #"\)\s+= "#, options: [.regularExpression, .backwards]) else { continue }
                events.append(
                    SyscallEvent(
                        name: start.name, arguments: start.arguments + rest[..<equals.lowerBound],
                        result: String(rest[equals.upperBound...])))
            } else if let open = body.firstIndex(of: "("), let equals = body.range(of: ") = ", options: .backwards) {
                events.append(
                    SyscallEvent(
                        name: String(body[..<open]), arguments: String(body[body.index(after: open)..<equals.lowerBound]),
                        result: String(body[equals.upperBound...])))
            }
        }
        return events
    }
}
