import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Something to do after a backup: run a shell command or POST a JSON report to a URL.
public struct HookAction: Sendable, Equatable {
    /// What a hook does: run a shell command, or POST to a URL.
    public enum Target: Sendable, Equatable {
        /// Run with `/bin/sh -c`; the outcome is in `STOREBACKUP_*` environment variables.
        case command(String)
        /// POST the outcome as JSON (`HookEvent`).
        case url(String)
    }
    /// The command to run or the URL to post to.
    public var target: Target
    /// After this long the command is killed or the request abandoned.
    public var timeout: TimeInterval

    /// An action on `target`, given up after `timeout` seconds.
    public init(_ target: Target, timeout: TimeInterval = 30) {
        self.target = target
        self.timeout = timeout
    }
}

/// Hooks run after each scheduled backup, by outcome; `onFailure` also after a failed
/// restore drill (``HookEvent/task`` is then "verify").
public struct BackupHooks: Sendable, Equatable {
    /// Run, in order, after each backup that succeeded (`on-success:`).
    public var onSuccess: [HookAction]
    /// Run, in order, after each backup that failed (not one cancelled by shutdown) and each
    /// failed restore drill (`on-failure:`).
    public var onFailure: [HookAction]

    /// Hooks for each outcome; none by default.
    public init(onSuccess: [HookAction] = [], onFailure: [HookAction] = []) {
        self.onSuccess = onSuccess
        self.onFailure = onFailure
    }
}

/// What a hook is told: the JSON body of a URL hook, and the environment of a command hook.
public struct HookEvent: Sendable, Codable, Equatable {
    /// "success" or "failure".
    public var event: String
    /// The store's name (``StoreJob/name``).
    public var store: String
    /// The absolute path of the stores directory backed up.
    public var storesDirectory: String
    /// The destination's display name; with several, those that failed (all of them on
    /// success), separated by commas.
    public var destination: String
    /// The name of the machine that ran the backup, as backups record it (``BackupOrigin/currentHost``).
    public var host: String
    /// When the run began.
    public var startedAt: Date
    /// When the run ended, just before the hooks.
    public var finishedAt: Date
    /// The new backup's name (success), or the backup that failed a restore drill.
    public var backup: String?
    /// The new backup's size in bytes (success).
    public var size: Int64?
    /// What went wrong (failure).
    public var error: String?
    /// Backups deleted by retention after this one.
    public var pruned: [String]?
    /// "verify" for a restore drill (`backup` is then the backup that failed); nil for a backup run.
    public var task: String?

    /// An event; ``BackupService`` makes these for its hooks.
    public init(
        event: String, store: String, storesDirectory: String, destination: String, host: String,
        startedAt: Date, finishedAt: Date, backup: String? = nil, size: Int64? = nil,
        error: String? = nil, pruned: [String]? = nil, task: String? = nil
    ) {
        self.event = event; self.store = store; self.storesDirectory = storesDirectory
        self.destination = destination; self.host = host; self.startedAt = startedAt
        self.finishedAt = finishedAt; self.backup = backup; self.size = size; self.error = error; self.pruned = pruned
        self.task = task
    }

    var environment: [String: String] {
        var values = [
            "STOREBACKUP_EVENT": event, "STOREBACKUP_STORE": store, "STOREBACKUP_STORES_DIR": storesDirectory,
            "STOREBACKUP_DESTINATION": destination, "STOREBACKUP_HOST": host,
        ]
        if let backup { values["STOREBACKUP_BACKUP"] = backup }
        if let size { values["STOREBACKUP_SIZE"] = String(size) }
        if let error { values["STOREBACKUP_ERROR"] = error }
        if let task { values["STOREBACKUP_TASK"] = task }
        return values
    }

    func json() -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .utcTimestamp
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)) ?? Data("{}".utf8)
    }
}

/// Runs hooks. A hook that fails, times out or cannot start is logged and otherwise
/// ignored: hooks report on a backup, they never decide its outcome.
struct HookRunner: Sendable {
    var logger: Logger
    var transport: TransportOptions

    init(logger: Logger, transport: TransportOptions = .fromEnvironment()) {
        self.logger = logger
        self.transport = transport
    }

    /// Runs each action in turn; returns how many succeeded.
    @discardableResult
    func run(_ actions: [HookAction], event: HookEvent) async -> Int {
        var succeeded = 0
        for action in actions {
            do {
                switch action.target {
                case .command(let command): try await runCommand(command, event: event, timeout: action.timeout)
                case .url(let url): try await post(url, event: event, timeout: action.timeout)
                }
                succeeded += 1
            } catch {
                logger.warning(
                    "on-\(event.event) hook failed (the backup's outcome is unchanged)",
                    metadata: ["hook": "\(Self.label(action.target))", "error": "\(error)"])
            }
        }
        return succeeded
    }

    /// Names a hook in logs without secrets: a URL's path and query (webhook tokens live
    /// there) are dropped, and a command is shown only by its first word.
    static func label(_ target: HookAction.Target) -> String {
        switch target {
        case .command(let command):
            return "command " + (command.split(separator: " ").first.map(String.init) ?? "")
        case .url(let url):
            guard let parts = URLComponents(string: url), let scheme = parts.scheme, let host = parts.host else { return "URL" }
            return "POST \(scheme)://\(host)\(parts.port.map { ":\($0)" } ?? "")/…"
        }
    }

    /// Runs the hook's command as restore runs the app's commands (``ShellCommand``): its own
    /// process group, killed whole at the deadline, our descriptors closed.
    private func runCommand(_ command: String, event: HookEvent, timeout: TimeInterval) async throws {
        let environment = event.environment
        let outcome = try await runBlocking(name: "storebackup-hook") { _ in
            ShellCommand.run(command, timeout: timeout, environment: environment)
        }
        if let failure = outcome.failure { throw HookError(failure) }
    }

    private func post(_ url: String, event: HookEvent, timeout: TimeInterval) async throws {
        guard let scheme = URLComponents(string: url)?.scheme?.lowercased(), ["http", "https"].contains(scheme) else {
            throw HookError("only http:// and https:// URLs can be hooks")
        }
        let request = TransferRequest(
            method: "POST", url: url, headers: [("Content-Type", "application/json")],
            body: .bytes(event.json()), sink: .memory(limit: 64 << 10), label: Self.label(.url(url)))
        let transfer = CurlTransfer(options: transport)
        let response = try await runBlocking(name: "storebackup-hook") { cancel in
            // The timeout cancels the transfer through the same flag task cancellation uses.
            let timer = DispatchWorkItem { cancel.cancel() }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: timer)
            defer { timer.cancel() }
            return try transfer.perform(request, cancel: cancel)
        }
        guard (200..<300).contains(response.status) else { throw HookError("the server answered HTTP \(response.status)") }
    }
}

/// Why a hook failed (logged only, never thrown out of the library).
struct HookError: Error, Sendable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
