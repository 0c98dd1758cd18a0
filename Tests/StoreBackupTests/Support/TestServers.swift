import Foundation
import XCTest

/// Real servers on loopback for the remote destinations, started through
/// Tests/Servers/testservers.py (rclone's S3, Apache mod_dav, OpenSSH sftp, the fault proxy).
final class TestServers {
    let root: String
    private static let script = TestEnvironment.packageRoot + "/Tests/Servers/testservers.py"

    init(label: String) throws {
        root = NSTemporaryDirectory() + "storebackup-servers-\(label)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        chmod(root, 0o755)
    }

    /// Starts a server ("s3", "webdav", "sftp", or "proxy" with extra arguments) and
    /// returns the JSON it prints (ports, credentials, paths).
    func start(_ kind: String, arguments: [String] = []) throws -> [String: Any] {
        let output = try Self.python([Self.script, "start", kind, "--root", root] + arguments)
        guard let json = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any] else {
            throw XCTSkip("could not start \(kind): \(output)")
        }
        return json
    }

    func stop() {
        _ = try? Self.python([Self.script, "stop", "--root", root])
        try? FileManager.default.removeItem(atPath: root)
    }

    private static func python(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3"] + arguments
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw NSError(
                domain: "TestServers", code: Int(process.terminationStatus),
                userInfo: [NSLocalizedDescriptionKey: "testservers.py \(arguments.dropFirst().joined(separator: " ")) failed"])
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
