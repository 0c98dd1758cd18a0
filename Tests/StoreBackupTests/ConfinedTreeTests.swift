import Foundation
import XCTest

@testable import StoreBackup

/// ``ConfinedTree`` keeps the folders it walked to open (``OpenFolders``): files still land
/// where their paths say after a folder is removed and made again, beyond the number of
/// folders kept open, and from several threads at once, and no descriptor outlives the tree.
final class ConfinedTreeTests: XCTestCase {
    private var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("confined-tree")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    private static func put(_ tree: ConfinedTree, _ relative: String, _ text: String) throws {
        let fd = try tree.createFile(relative)
        defer { close(fd) }
        XCTAssertEqual(text.utf8.count, text.withCString { write(fd, $0, strlen($0)) })
    }

    private func contents(_ relative: String) -> String? {
        FileManager.default.contents(atPath: work + "/tree/" + relative).map { String(decoding: $0, as: UTF8.self) }
    }

    private func openDescriptors() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
    }

    func testAFolderRemovedAndMadeAgainGetsTheNextFiles() throws {
        let tree = try ConfinedTree(creating: work + "/tree")
        try Self.put(tree, "a/b/one", "1")
        try tree.remove("a")
        XCTAssertNil(contents("a/b/one"))
        try Self.put(tree, "a/b/two", "2")
        XCTAssertEqual(contents("a/b/two"), "2")
        // Removing a file leaves its folder kept and usable.
        try tree.remove("a/b/two")
        try Self.put(tree, "a/b/three", "3")
        XCTAssertEqual(contents("a/b/three"), "3")
    }

    func testMoreFoldersThanAreKeptOpenFromSeveralThreads() throws {
        let before = try openDescriptors()
        do {
            let tree = try ConfinedTree(creating: work + "/tree")
            let folders = OpenFolders.limit * 3
            let failures = Locked<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 4) { worker in
                for round in 0..<3 {
                    for folder in 0..<folders {
                        let relative = "f\(folder % 7)/g\(folder)/file-\(worker)-\(round)"
                        do { try Self.put(tree, relative, relative) } catch {
                            failures.withLock { $0.append("\(relative): \(error)") }
                        }
                    }
                }
            }
            XCTAssertEqual(failures.current, [])
            XCTAssertLessThanOrEqual(try openDescriptors(), before + OpenFolders.limit + 1)
            for folder in 0..<folders {
                for worker in 0..<4 {
                    let relative = "f\(folder % 7)/g\(folder)/file-\(worker)-2"
                    XCTAssertEqual(contents(relative), relative)
                }
            }
        }
        XCTAssertEqual(try openDescriptors(), before, "every folder descriptor is closed with the tree")
    }
}
