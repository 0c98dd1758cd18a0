import Foundation
import XCTest

/// A test class with a scratch folder of its own (`work`), made in its setUp.
protocol WorkFolderTest: AnyObject {
    var work: String { get }
}

extension WorkFolderTest {
    /// A file of `bytes` random bytes named `name` in the work folder, written a MiB at a
    /// time so large files cost no more memory than small ones.
    @discardableResult
    func makeFile(_ name: String, bytes: Int) throws -> String {
        let path = work + "/" + name
        let random = try XCTUnwrap(FileHandle(forReadingAtPath: "/dev/urandom"))
        defer { try? random.close() }
        FileManager.default.createFile(atPath: path, contents: nil)
        let out = try XCTUnwrap(FileHandle(forWritingAtPath: path))
        defer { try? out.close() }
        var left = bytes
        while left > 0 {
            let piece = min(left, 1 << 20)
            out.write(random.readData(ofLength: piece))
            left -= piece
        }
        return path
    }
}

/// Runs `command` with /bin/sh; a non-zero exit is a test failure showing its stderr.
func shell(_ command: String, file: StaticString = #filePath, line: UInt = #line) throws {
    let result = try runTool("/bin/sh", ["-c", command])
    XCTAssertEqual(result.status, 0, "\(command): \(result.stderr)", file: file, line: line)
}

/// Runs a program that must succeed (a fixture's key, certificate); a non-zero exit throws,
/// with the program's stderr, so the test fails rather than going on without its fixture.
@discardableResult
func runChecked(_ executable: String, _ arguments: [String]) throws -> CommandResult {
    let result = try runTool(executable, arguments)
    guard result.status == 0 else {
        throw NSError(
            domain: "run", code: Int(result.status),
            userInfo: [NSLocalizedDescriptionKey: "\(executable) \(arguments.joined(separator: " ")) failed: \(result.stderr)"])
    }
    return result
}
