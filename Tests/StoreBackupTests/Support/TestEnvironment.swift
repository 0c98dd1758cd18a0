import Foundation
import XCTest

@testable import StoreBackup

/// Paths and processes the tests share.
enum TestEnvironment {
    static let packageRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// The storebackup executable built next to this test bundle (or $STOREBACKUP_BINARY).
    static let binary: String = {
        if let explicit = ProcessInfo.processInfo.environment["STOREBACKUP_BINARY"] { return explicit }
        var candidates = [Bundle.main.bundleURL.appendingPathComponent("storebackup").path]
        for bundle in Bundle.allBundles {
            candidates.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent("storebackup").path)
        }
        candidates.append(packageRoot + "/.build/debug/storebackup")
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates.last!
    }()

    /// A count an environment variable may set (a longer opt-in run), else `default`; a value
    /// below `floor` or not a number fails the test, so no setting can empty it.
    static func count(_ variable: String, default value: Int, floor: Int) throws -> Int {
        guard let text = ProcessInfo.processInfo.environment[variable] else { return value }
        guard let asked = Int(text), asked >= floor else {
            XCTFail("\(variable)=\(text): at least \(floor) is needed")
            throw StoreBackupError.unexpected(reason: "\(variable) below its floor")
        }
        return asked
    }

    static func temporaryDirectory(_ label: String) throws -> String {
        let path = NSTemporaryDirectory() + "storebackup-test-\(label)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

/// The result of running the command line.
struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs `storebackup` with arguments; stdin is empty (not a terminal).
@discardableResult
func runStoreBackup(_ arguments: [String], environment: [String: String] = [:]) throws -> CommandResult {
    try runTool(TestEnvironment.binary, arguments, environment: environment)
}

/// Runs a program to completion, reading both pipes to the end before waiting so a full
/// pipe cannot stall the child. `stdin` (small: a secret, a config) is its whole input.
@discardableResult
func runTool(_ path: String, _ arguments: [String], environment: [String: String] = [:], stdin: String? = nil) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let input = Pipe()
    if stdin == nil { process.standardInput = FileHandle(forReadingAtPath: "/dev/null") } else { process.standardInput = input }
    try process.run()
    if let stdin {
        input.fileHandleForWriting.write(Data(stdin.utf8))
        try input.fileHandleForWriting.close()
    }
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data(), errData = Data()
    group.enter();
    DispatchQueue.global().async {
        outData = out.fileHandleForReading.readDataToEndOfFile(); group.leave()
    }
    group.enter();
    DispatchQueue.global().async {
        errData = err.fileHandleForReading.readDataToEndOfFile(); group.leave()
    }
    group.wait()
    process.waitUntilExit()
    return CommandResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self))
}

/// Runs a Python helper script (test fixtures: damaging archives, building odd databases);
/// a non-zero exit is a test failure showing its stderr.
func runPythonScript(_ script: String, _ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws {
    let result = try runTool("/usr/bin/env", ["python3", "-c", script] + arguments)
    XCTAssertEqual(result.status, 0, "helper script failed: \(result.stderr)", file: file, line: line)
}

/// Runs `storebackup` under Python's getrusage and returns its peak RSS in KiB (Int.max
/// when it failed, with a test failure naming its stderr).
func peakRSSKiBOfStoreBackup(
    _ arguments: [String], environment: [String: String] = [:],
    file: StaticString = #filePath, line: UInt = #line
) throws -> Int {
    let (result, peak) = try runStoreBackupMeasuringPeakRSS(arguments, environment: environment)
    XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
    return result.status == 0 ? peak : Int.max
}

/// Runs `storebackup` under Python's getrusage: its result (which may be a failure) and
/// its peak RSS in KiB.
func runStoreBackupMeasuringPeakRSS(_ arguments: [String], environment: [String: String] = [:]) throws -> (CommandResult, Int) {
    let script = """
        import resource, subprocess, sys
        result = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sys.stdout.write(result.stdout.decode(errors="replace")); sys.stderr.write(result.stderr.decode(errors="replace"))
        sys.stdout.write("\\npeak-rss-kib %d\\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        sys.exit(result.returncode)
        """
    var result = try runTool("/usr/bin/env", ["python3", "-c", script, TestEnvironment.binary] + arguments, environment: environment)
    let marker = "\npeak-rss-kib "
    guard let range = result.stdout.range(of: marker, options: .backwards) else { return (result, Int.max) }
    let peak = Int(result.stdout[range.upperBound...].trimmingCharacters(in: .whitespacesAndNewlines)) ?? Int.max
    result.stdout = String(result.stdout[..<range.lowerBound])
    return (result, peak)
}

/// A storebackup process started in the background, for tests that kill it mid-way.
final class BackgroundCommand {
    let process = Process()
    private let errorPipe = Pipe()
    private var buffered = ""

    init(_ arguments: [String], environment: [String: String]) throws {
        process.executableURL = URL(fileURLWithPath: TestEnvironment.binary)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { _, new in new }
        process.environment = env
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = errorPipe
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        try process.run()
    }

    /// Blocks until stderr has a line containing `text`; returns false if the process ended first.
    func waitForLine(containing text: String) -> Bool {
        let handle = errorPipe.fileHandleForReading
        while !buffered.contains(text) {
            let data = handle.availableData
            if data.isEmpty { return false }
            buffered += String(decoding: data, as: UTF8.self)
        }
        return true
    }

    /// Reads stderr to its end, waits for the process and returns its exit status.
    func waitForExit() -> Int32 {
        buffered += String(decoding: errorPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return process.terminationStatus
    }

    func kill9() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Stops the process where it is (SIGSTOP) and waits until the kernel says it is
    /// stopped, so what is read next is the state a kill now would interrupt. False when it
    /// had already ended.
    func freeze() -> Bool {
        let pid = process.processIdentifier
        guard kill(pid, SIGSTOP) == 0 else { return false }
        while true {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            let state = stat[stat.index(close, offsetBy: 2)]
            if state == "T" || state == "t" { return true }
            if state == "Z" || state == "X" { return false }
            usleep(100)
        }
    }

    /// Appends what stderr holds now to `stderrSoFar`, without waiting for more.
    func readAvailableStderr() {
        let fd = errorPipe.fileHandleForReading.fileDescriptor
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let got = read(fd, &buffer, buffer.count)
            if got <= 0 { break }
            buffered += String(decoding: buffer[0..<got], as: UTF8.self)
        }
    }

    /// Bytes the process has written so far (`wchar` in /proc/PID/io); nil once it is gone.
    var bytesWritten: Int? {
        guard let io = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/io", encoding: .utf8) else { return nil }
        return io.split(separator: "\n").first { $0.hasPrefix("wchar:") }.flatMap {
            Int($0.dropFirst(6).trimmingCharacters(in: .whitespaces))
        }
    }

    var stderrSoFar: String { buffered }
}
