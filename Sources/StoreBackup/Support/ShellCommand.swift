import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Runs `/bin/sh -c COMMAND` in a process group of its own, with a deadline after which the
/// whole group is killed (a stop command's children too), and waits for it.
///
/// Its own group keeps a terminal's Ctrl-C (sent to the foreground group) away from the
/// command, so a stop or start runs to its end while the restore winds down. Its output
/// goes to our standard error, keeping standard output for results (`--json`); no other
/// descriptor of ours is passed on. Restore's stop and start commands and the scheduler's
/// hooks all run this way.
enum ShellCommand {
    enum Outcome: Sendable, Equatable {
        case succeeded
        case failed(status: Int32)
        case killedBySignal(Int32)
        case timedOut(seconds: Double)
        case couldNotStart(errno: Int32)

        var succeeded: Bool { self == .succeeded }

        /// Why it did not succeed, in words.
        var failure: String? {
            switch self {
            case .succeeded: return nil
            case .failed(let status): return "it exited with status \(status)"
            case .killedBySignal(let signal): return "it was killed by signal \(signal)"
            case .timedOut(let seconds): return "it was still running after \(DurationText.format(seconds)) and was killed"
            case .couldNotStart(let code): return "/bin/sh could not be started: \(String(cString: strerror(code)))"
            }
        }
    }

    /// Runs `command` and blocks until it ends or `timeout` seconds have passed; `environment`
    /// is added to this process's own (a hook's event).
    static func run(_ command: String, timeout: Double, environment: [String: String] = [:]) -> Outcome {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group (pgid = its pid), and default signal handling: this process
        // ignores SIGINT/SIGTERM while it cancels, which a child would otherwise inherit.
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var noMask = sigset_t()
        sigemptyset(&noMask)
        posix_spawnattr_setsigmask(&attributes, &noMask)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO)
        // Nothing else of ours reaches the app a start command launches: a descriptor it kept
        // (a pipe of whoever runs storebackup, a database) would outlive this restore.
        _ = sb_spawn_close_from(&actions, 3)

        let arguments: [UnsafeMutablePointer<CChar>?] = ["/bin/sh", "-c", command].map { (text: String) in strdup(text) } + [nil]
        defer { arguments.forEach { free($0) } }
        var pid: pid_t = 0
        var variables: [UnsafeMutablePointer<CChar>?] = []
        if !environment.isEmpty {
            let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
            variables = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        }
        defer { variables.forEach { free($0) } }
        let spawned =
            variables.isEmpty
            ? posix_spawn(&pid, "/bin/sh", &actions, &attributes, arguments, Glibc.environ)
            : posix_spawn(&pid, "/bin/sh", &actions, &attributes, arguments, variables)
        guard spawned == 0 else { return .couldNotStart(errno: spawned) }

        // The deadline kills the group unless the command has been reaped first (the lock
        // keeps a reused pid from being signalled).
        let state = Locked(false)
        let timedOut = Locked(false)
        let deadline = DispatchWorkItem {
            state.withLock { reaped in
                guard !reaped else { return }
                timedOut.withLock { $0 = true }
                kill(-pid, SIGKILL)
            }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: deadline)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        state.withLock { $0 = true }
        deadline.cancel()
        if timedOut.withLock({ $0 }) { return .timedOut(seconds: timeout) }
        let signal = status & 0x7f
        if signal != 0 { return .killedBySignal(signal) }
        let exitStatus = (status >> 8) & 0xff
        return exitStatus == 0 ? .succeeded : .failed(status: exitStatus)
    }
}
