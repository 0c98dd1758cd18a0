import ArgumentParser
import StoreBackup

/// `--stop-command`, `--start-command`, `--stop-timeout`: how `restore` and `undo` stop and
/// start the app around their swap.
struct AppCommandOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Stops the app before the swap (run with /bin/sh -c), e.g. 'systemctl stop myapp'.", valueName: "command"))
    var stopCommand: String?

    @Option(
        help: ArgumentHelp(
            "Starts the app after the swap, also after a rollback or a failure, e.g. 'systemctl start myapp'.", valueName: "command"))
    var startCommand: String?

    @Option(help: ArgumentHelp("Seconds the stop (and start) command may run before it is killed (default 60).", valueName: "seconds"))
    var stopTimeout: Double?

    func validate() throws {
        if startCommand != nil && stopCommand == nil {
            throw ValidationError("--start-command needs --stop-command (the app is started only after it was stopped)")
        }
        if let stopTimeout, !(stopTimeout > 0) { throw ValidationError("--stop-timeout must be a positive number of seconds") }
    }

    /// The stop and start commands: the command line's, else those of `configured` (the
    /// configuration's store with this path).
    func appCommands(configured: AppCommands?) -> AppCommands? {
        guard let stop = stopCommand ?? configured?.stop else { return nil }
        return AppCommands(
            stop: stop, start: startCommand ?? (stopCommand == nil ? configured?.start : nil),
            timeout: stopTimeout ?? configured?.timeout ?? AppCommands.defaultTimeout)
    }
}

extension ConfigurationOption {
    /// The configured store with this path (a configuration that cannot be read is ignored
    /// unless --config named it).
    func configuredStore(_ storesDirectory: String) -> StoreJob? {
        let configuration = path != nil ? load() : try? BackupConfiguration.load(path: effectivePath)
        return configuration?.stores.first { $0.storesDirectory == storesDirectory }
    }
}

extension AppDowntime {
    /// The `app` object of `restore --json` and `undo --json`.
    var jsonObject: [String: Any] {
        var app: [String: Any] = ["downtimeSeconds": seconds, "stopSeconds": stopSeconds]
        if let startSeconds { app["startSeconds"] = startSeconds }
        if let startFailure { app["startFailure"] = startFailure }
        return app
    }
}
