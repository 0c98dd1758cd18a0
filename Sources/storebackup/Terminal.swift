import Foundation
import StoreBackup

#if canImport(Glibc)
import Glibc
#endif

/// Everything the commands print, and how they end.
enum Terminal {
    static var standardErrorIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }
    static var standardInputIsTerminal: Bool { isatty(STDIN_FILENO) == 1 }

    static func info(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    static func output(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// Prints one clear line for a failure and exits non-zero (130 when cancelled).
    static func fail(_ error: Error) -> Never {
        ProgressPrinter.shared.finishLine()
        if let error = error as? StoreBackupError {
            info("storebackup: error: \(ErrorAdvice.describe(error))")
            exit(error == .cancelled ? 130 : 1)
        }
        if error is CancellationError {
            info("storebackup: error: \(ErrorAdvice.describe(StoreBackupError.cancelled))")
            exit(130)
        }
        info("storebackup: error: \(error)")
        exit(1)
    }

    static func confirm(_ question: String) -> Bool {
        FileHandle.standardError.write(Data("\(question) [y/N] ".utf8))
        guard let answer = readLine() else { return false }
        return ["y", "yes"].contains(answer.trimmingCharacters(in: .whitespaces).lowercased())
    }

    /// Reads a line from the terminal without echoing it (like getpass), the prompt on stderr.
    /// nil at end of input.
    static func readSecret(prompt: String) -> String? {
        FileHandle.standardError.write(Data(prompt.utf8))
        var saved = termios()
        let canHide = tcgetattr(STDIN_FILENO, &saved) == 0
        if canHide {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            quiet.c_lflag |= tcflag_t(ECHONL)
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        }
        defer {
            if canHide { tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved) }
        }
        return readLine(strippingNewline: true)
    }

    static func formatBytes(_ bytes: Int64) -> String {
        ByteCountText.describe(bytes)
    }

    /// Runs the command's work as a task that Ctrl-C (SIGINT) or SIGTERM cancels.
    static func runCancellable<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async -> T {
        let task = Task { try await work() }
        var sources: [DispatchSourceSignal] = []
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                Terminal.info("\nstorebackup: stopping; cleaning up…")
                task.cancel()
            }
            source.resume()
            sources.append(source)
        }
        defer { sources.forEach { $0.cancel() } }
        do {
            return try await task.value
        } catch {
            fail(error)
        }
    }
}

/// Progress on stderr: one rewritten line on a terminal, plain log lines otherwise.
// Unchecked: the line state is used only while `lock` is held.
final class ProgressPrinter: @unchecked Sendable {
    static let shared = ProgressPrinter()
    private let lock = NSLock()
    private var lineOpen = false
    private var lastPhase: BackupProgress.Phase?
    private var lastLoggedTenth = -1

    func handler() -> ProgressHandler {
        { [self] progress in self.show(progress) }
    }

    func show(_ progress: BackupProgress) {
        lock.withLock {
            let fraction = progress.bytesTotal > 0 ? Double(progress.bytesDone) / Double(progress.bytesTotal) : 0
            let amounts =
                progress.bytesTotal > 0
                ? " \(Terminal.formatBytes(progress.bytesDone)) / \(Terminal.formatBytes(progress.bytesTotal)) (\(Int(fraction * 100))%)"
                : ""
            let file = progress.currentFile.map { "  \($0)" } ?? ""
            if Terminal.standardErrorIsTerminal {
                let width = 110
                var line = "\(progress.phase.rawValue)\(amounts)\(file)"
                if line.count > width { line = String(line.prefix(width - 1)) + "…" }
                FileHandle.standardError.write(Data("\r\u{1B}[K\(line)".utf8))
                lineOpen = true
                if progress.phase == .done { FileHandle.standardError.write(Data("\n".utf8)); lineOpen = false }
            } else {
                let tenth = Int(fraction * 10)
                if progress.phase != lastPhase || (progress.bytesTotal > 0 && tenth > lastLoggedTenth) {
                    if progress.phase != .done {
                        FileHandle.standardError.write(Data("storebackup: \(progress.phase.rawValue)\(amounts)\(file)\n".utf8))
                    }
                    lastLoggedTenth = progress.phase != lastPhase ? (progress.bytesTotal > 0 ? tenth : -1) : tenth
                    lastPhase = progress.phase
                }
            }
        }
    }

    func finishLine() {
        lock.withLock {
            if lineOpen { FileHandle.standardError.write(Data("\n".utf8)); lineOpen = false }
        }
    }
}
