import Foundation

/// Shell commands that stop and start the app around a restore's swap, for an app that runs
/// in its own process (a service): the backup is downloaded, unpacked and checked while
/// the app runs; only the in-use check, the swap and the reload happen while it is stopped.
///
/// `start` runs after the restore is committed or rolled back, and also when it fails or is
/// cancelled after `stop` ran: the app is never left stopped by a restore that can still
/// act. Both run with `/bin/sh -c`, in a process group of their own that is killed when
/// `timeout` passes.
public struct AppCommands: Sendable, Equatable {
    /// Stops the app and returns once it has closed the store (e.g. `systemctl stop myapp`).
    public var stop: String
    /// Starts the app again (e.g. `systemctl start myapp`); nil leaves it stopped.
    public var start: String?
    /// Seconds each command may run before its process group is killed (a stop that times
    /// out fails: nothing is swapped).
    public var timeout: Double

    /// Seconds each command may run when no timeout is given (`stop-timeout:` unset).
    public static let defaultTimeout: Double = 60

    /// Commands around a restore: `stop` and `start` run with `/bin/sh -c`; without `start`
    /// the app is left stopped. `timeout` is in seconds, for each command.
    public init(stop: String, start: String? = nil, timeout: Double = AppCommands.defaultTimeout) {
        self.stop = stop
        self.start = start
        self.timeout = timeout
    }
}

/// How long the app was stopped by a restore, and how its start went.
public struct AppDowntime: Sendable, Equatable, CustomStringConvertible {
    /// From starting the stop command to the start command's return (or, without a start
    /// command, to the end of the restore).
    public var seconds: Double
    /// The stop command's own run time.
    public var stopSeconds: Double
    /// The start command's own run time; nil when there was none.
    public var startSeconds: Double?
    /// Why the start command failed; nil when it succeeded or there was none.
    public var startFailure: String?

    /// One line, e.g. `the app was stopped for 0.412 s (stop command 0.350 s, start command 0.041 s)`.
    public var description: String {
        func format(_ seconds: Double) -> String { String(format: "%.3f s", seconds) }
        let start = startSeconds.map { ", start command " + format($0) } ?? "; there is no start command: it is still stopped"
        return "the app was stopped for \(format(seconds)) (stop command \(format(stopSeconds))\(start))"
    }
}
