import Foundation
import XCTest

/// The shell completions the binary generates (and the package ships) really complete:
/// partial command lines are completed in bash and in zsh with the generated scripts, and
/// the candidates are compared with the subcommands and options the command line has, as
/// its own description (`--experimental-dump-help`) lists them.
final class CompletionTests: XCTestCase {
    var work = ""

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("completion")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: work)
    }

    /// The command line's description: each subcommand's name with its long options.
    func commandLine() throws -> (subcommands: [String], rootOptions: [String], options: [String: [String]]) {
        let dump = try runStoreBackup(["--experimental-dump-help"])
        XCTAssertEqual(dump.status, 0, dump.stderr)
        let root = try XCTUnwrap(
            (try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])?["command"] as? [String: Any])
        func names(_ command: [String: Any]) -> [String] {
            (command["arguments"] as? [[String: Any]] ?? []).flatMap { argument in
                (argument["names"] as? [[String: Any]] ?? []).map {
                    ($0["kind"] as? String == "short" ? "-" : "--") + ($0["name"] as? String ?? "")
                }
            }
        }
        let subcommands = root["subcommands"] as? [[String: Any]] ?? []
        return (
            subcommands.compactMap { $0["commandName"] as? String }, names(root),
            Dictionary(uniqueKeysWithValues: subcommands.map { ($0["commandName"] as! String, names($0)) })
        )
    }

    /// The partial lines and what each must offer, from the command line's description.
    func cases() throws -> [(words: [String], expected: Set<String>)] {
        let cli = try commandLine()
        // Not vacuous: the description names the main commands and their options.
        for command in ["create", "restore", "verify", "extract", "prune"] {
            XCTAssertTrue(cli.subcommands.contains(command), "\(command) in \(cli.subcommands)")
        }
        XCTAssertTrue(cli.options["create"]?.contains("--to") == true, "\(cli.options["create"] ?? [])")
        return [
            (["storebackup", "re"], Set(cli.subcommands.filter { $0.hasPrefix("re") })),
            (["storebackup", "ver"], ["verify"]),
            (["storebackup", "create", "--"], Set(cli.options["create"]!.filter { $0.hasPrefix("--") })),
            (["storebackup", "restore", "--f"], Set(cli.options["restore"]!.filter { $0.hasPrefix("--f") })),
            (["storebackup", "prune", "--k"], Set(cli.options["prune"]!.filter { $0.hasPrefix("--k") })),
        ]
    }

    func completionScript(_ shell: String) throws -> String {
        let generated = try runStoreBackup(["--generate-completion-script", shell])
        XCTAssertEqual(generated.status, 0, generated.stderr)
        return generated.stdout
    }

    func testBashCompletesSubcommandsAndOptions() throws {
        let script = work + "/storebackup.bash"
        try completionScript("bash").write(toFile: script, atomically: true, encoding: .utf8)
        for (words, expected) in try cases() {
            XCTAssertFalse(expected.isEmpty, "\(words): nothing expected")
            let completed = try runTool(
                "/usr/bin/env", ["bash", "--norc", "--noprofile", Self.support + "/complete_bash.sh", script] + words)
            XCTAssertEqual(completed.status, 0, completed.stderr)
            let offered = Set(completed.stdout.split(separator: "\n").map(String.init))
            XCTAssertEqual(offered, expected, "bash completing \(words.joined(separator: " ")): \(completed.stderr)")
        }
    }

    func testZshCompletesSubcommandsAndOptions() throws {
        guard let zsh = ["/usr/bin/zsh", "/bin/zsh"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            return XCTFail("zsh is missing (scripts/install-deps installs it)")
        }
        let functions = work + "/zsh-functions"
        try FileManager.default.createDirectory(atPath: functions, withIntermediateDirectories: true)
        try completionScript("zsh").write(toFile: functions + "/_storebackup", atomically: true, encoding: .utf8)
        for (index, (words, expected)) in try cases().enumerated() {
            let output = work + "/zsh-candidates-\(index)"
            // Bounded: a completion that never returns ends with the timeout, not a hung suite.
            let completed = try runTool(
                "/usr/bin/timeout",
                [
                    "30", zsh, "-f", Self.support + "/complete_zsh.zsh", functions, output,
                    words.joined(separator: " "),
                ], environment: ["HOME": work])
            XCTAssertEqual(completed.status, 0, "zsh completing \(words): \(completed.stderr)")
            let offered = Set(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init))
            XCTAssertEqual(offered, expected, "zsh completing \(words.joined(separator: " "))")
        }
    }

    static let support = TestEnvironment.packageRoot + "/Tests/Support"
}
