import Foundation
import Yams

/// The YAML configuration of `storebackup run` (default `/etc/storebackup.yml`).
///
/// ```yaml
/// destination: /var/backups/storebackup   # default for every store (a path or URL)
/// schedule: daily 02:30                   # default: daily HH:MM, 5-field cron, or every 6h
/// retention: {keep-daily: 7, keep-weekly: 4}
/// stores:
///   - name: app
///     path: /var/lib/app/Stores
///     destination: s3://bucket/app        # overrides the default
///   - name: ledger
///     path: /var/lib/ledger/Stores
///     destinations: [/var/backups/ledger, s3://bucket/ledger]   # built once, published to each
///     jitter: 10m
///     encrypt: {password-file: /etc/storebackup.pass}
///     stop-command: systemctl stop ledger   # restore stops and starts the app around the swap
///     start-command: systemctl start ledger
///     stop-timeout: 60s
///     verify: {schedule: "30 4 * * *", pick: rotate}   # restore drills: newest | rotate | all-within 7d
///     verify-after-create: true           # the default: check each backup right after it is made
///     incremental: true                   # chains: a full, then only what changed (docs/incremental-backups.md)
///     full-every: 7d                      # with incremental: the defaults shown
///     max-chain: 14
///     max-delta-share: 0.5
///     full-scan-every: 1h                 # run: a point at least this often even when nothing looks changed
///     keep-replaced: 7d                   # restore keeps the store it replaces this long, for undo (0: not at all)
/// hooks:
///   on-failure: {url: "https://example.test/alert", timeout: 10s}
/// metrics: {file: /var/lib/prometheus/node-exporter/storebackup.prom}
/// retry-for: 10m                          # each remote operation may retry this long (default 5m)
/// limit-upload: 5M                        # bytes/s for the whole run (k, M, G are decimal)
/// ```
///
/// Every per-store key may also be given at the top level as a default. `${NAME}` in any
/// value is replaced by the environment variable NAME (an unset one is an error), so
/// secrets can stay out of the file. Unknown keys are errors: a misspelt `retention`
/// must not silently keep everything.
public struct BackupConfiguration: Sendable, Equatable {
    /// Where `storebackup` looks for its configuration when no file is named.
    public static let defaultPath = "/etc/storebackup.yml"

    /// The file it was read from (nil when parsed from text).
    public var file: String?
    /// The stores to back up (`stores:`), top-level defaults applied.
    public var stores: [StoreJob]
    /// Where `BackupState` files go; nil: `BackupStateStore.defaultDirectory()`.
    public var stateDirectory: String?
    /// `proof-key`: the proof key file (``ProofKey``); nil: ``ProofKey/defaultPath(environment:)``.
    public var proofKeyFile: String?
    /// `s3-endpoint`: the endpoint of an S3-compatible service, as `--s3-endpoint`.
    public var s3Endpoint: String?
    /// `ca-file`: a PEM file of extra trusted CAs, as `--ca-file`.
    public var caFile: String?
    /// `credentials`: a credentials file for remote destinations, as `--credentials`.
    public var credentialsFile: String?
    /// `ssh-key`: the SSH private key for sftp:// destinations, as `--ssh-key`.
    public var sshKey: String?
    /// `known-hosts`: the known_hosts file for sftp:// destinations, as `--known-hosts`.
    public var knownHosts: String?
    /// `retry-for: 5m`: how long each operation on a remote destination may retry (see ``RetryPolicy/budget``).
    public var retryFor: Double?
    /// `limit-upload: 5M`: bytes per second sent, the total of every transfer of a run.
    public var limitUpload: Int64?
    /// `limit-download: 20M`: bytes per second received, the total of every transfer of a run.
    public var limitDownload: Int64?
    /// `retain-days: 30` and `retain-mode: governance|compliance`: S3 Object Lock on each new backup.
    public var objectLock: ObjectLockRetention?
    /// `metrics: {file: PATH}`: where the command line writes Prometheus metrics in the text
    /// format after each run, for node_exporter's textfile collector (see ``BackupMetrics``).
    public var metricsFile: String?

    /// A configuration of `stores`, every other setting unset; `file` is only named in messages.
    public init(file: String? = nil, stores: [StoreJob], stateDirectory: String? = nil) {
        self.file = file
        self.stores = stores
        self.stateDirectory = stateDirectory
    }

    /// The destination options (endpoint, CA, credentials file, SSH files) the file names.
    public func destinationOptions(environment: [String: String] = ProcessInfo.processInfo.environment) -> DestinationOptions {
        var options = DestinationOptions(
            s3Endpoint: s3Endpoint, sshKey: sshKey, knownHosts: knownHosts,
            credentialsFile: credentialsFile, environment: environment)
        if let caFile { options.transport.caFile = caFile }
        if let retryFor { options.retry.budget = retryFor }
        options.objectLock = objectLock
        options.transport.uploadLimit = limitUpload.map(RateLimit.init(bytesPerSecond:))
        options.transport.downloadLimit = limitDownload.map(RateLimit.init(bytesPerSecond:))
        return options
    }

    /// The state files, in ``stateDirectory`` or else the default folder.
    public var stateStore: BackupStateStore {
        BackupStateStore(directory: stateDirectory ?? BackupStateStore.defaultDirectory())
    }

    /// Reads and checks a configuration file.
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> BackupConfiguration
    {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = FileSystem.fileExists(path) ? "cannot be read (permissions?)" : "does not exist"
            throw StoreBackupError.invalidConfiguration(
                ConfigurationProblem(file: path, line: nil, key: nil, message: "configuration file \(reason)"))
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw StoreBackupError.invalidConfiguration(ConfigurationProblem(file: path, line: nil, key: nil, message: "is not UTF-8 text"))
        }
        return try parse(yaml: text, file: path, environment: environment)
    }

    /// Parses configuration text; `file` is only used in error messages.
    public static func parse(
        yaml: String, file: String = "<configuration>",
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> BackupConfiguration {
        let root: Node?
        do { root = try Yams.compose(yaml: yaml) } catch let error as YamlError {
            throw StoreBackupError.invalidConfiguration(ConfigurationProblem.syntax(error, file: file))
        }
        guard let root else {
            throw StoreBackupError.invalidConfiguration(
                ConfigurationProblem(file: file, line: 1, key: nil, message: "the file is empty; it needs a `stores:` list"))
        }
        let reader = ConfigurationReader(file: file, environment: environment)
        return try reader.read(root)
    }
}

extension ConfigurationProblem {
    static func syntax(_ error: YamlError, file: String) -> ConfigurationProblem {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            return ConfigurationProblem(file: file, line: mark.line, key: nil, message: "invalid YAML: \(problem) (column \(mark.column))")
        default:
            return ConfigurationProblem(file: file, line: nil, key: nil, message: "invalid YAML: \(error)")
        }
    }
}

/// Walks the YAML tree, checking each key and keeping track of where it is for errors.
private struct ConfigurationReader {
    let file: String
    let environment: [String: String]

    static let storeKeys: Set<String> = [
        "name", "path", "destination", "destinations", "schedule", "jitter", "retention", "level", "threads", "encrypt", "hooks",
        "verify", "verify-after-create", "stop-command", "start-command", "stop-timeout", "incremental", "full-every",
        "max-chain", "max-delta-share", "full-scan-every", "keep-replaced", "levels",
    ]
    static let topKeys: Set<String> = storeKeys.subtracting(["name", "path", "stop-command", "start-command", "stop-timeout"]).union(
        [
            "stores", "state-directory", "proof-key", "s3-endpoint", "ca-file", "credentials", "ssh-key", "known-hosts", "metrics",
            "retry-for", "limit-upload", "limit-download", "retain-days", "retain-mode",
        ])
    static let retentionKeys = ["keep-last", "keep-hourly", "keep-daily", "keep-weekly", "keep-monthly", "keep-yearly", "keep-within"]

    func fail(_ node: Node?, _ key: String, _ message: String) -> StoreBackupError {
        .invalidConfiguration(ConfigurationProblem(file: file, line: node?.mark?.line, key: key, message: message))
    }

    /// The pairs of a mapping, refusing unknown keys.
    func mapping(_ node: Node, at key: String, allowed: Set<String>) throws -> [String: Node] {
        guard case .mapping(let mapping) = node else { throw fail(node, key, "must be a mapping (key: value)") }
        var result: [String: Node] = [:]
        for (keyNode, value) in mapping {
            guard let name = keyNode.string else { throw fail(keyNode, key, "keys must be plain text") }
            let path = key.isEmpty ? name : key + "." + name
            guard allowed.contains(name) else {
                throw fail(keyNode, path, "unknown key (expected one of: \(allowed.sorted().joined(separator: ", ")))")
            }
            guard result[name] == nil else { throw fail(keyNode, path, "given twice") }
            result[name] = value
        }
        return result
    }

    /// A scalar's text with `${NAME}` replaced from the environment.
    func string(_ node: Node, at key: String) throws -> String {
        guard case .scalar(let scalar) = node else { throw fail(node, key, "must be a single value") }
        var text = scalar.string
        while let start = text.range(of: "${") {
            guard let end = text.range(of: "}", range: start.upperBound..<text.endIndex) else {
                throw fail(node, key, "unterminated ${…} reference")
            }
            let name = String(text[start.upperBound..<end.lowerBound])
            guard let value = environment[name] else {
                throw fail(node, key, "refers to the environment variable \(name), which is not set")
            }
            text.replaceSubrange(start.lowerBound..<end.upperBound, with: value)
        }
        return text
    }

    func count(_ node: Node, at key: String) throws -> Int {
        guard let value = Int(try string(node, at: key)), value >= 0 else { throw fail(node, key, "must be a whole number ≥ 0") }
        return value
    }

    func read(_ root: Node) throws -> BackupConfiguration {
        let top = try mapping(root, at: "", allowed: Self.topKeys)
        guard let storesNode = top["stores"] else {
            throw fail(root, "stores", "missing: list the stores to back up (each with a name and a path)")
        }
        guard case .sequence(let list) = storesNode, !list.isEmpty else {
            throw fail(storesNode, "stores", "must be a non-empty list of stores")
        }
        var jobs: [StoreJob] = []
        for (index, storeNode) in list.enumerated() {
            let key = "stores[\(index)]"
            let store = try mapping(storeNode, at: key, allowed: Self.storeKeys)
            let job = try readStore(store, defaults: top, node: storeNode, at: key)
            if jobs.contains(where: { $0.name == job.name }) {
                throw fail(store["name"], key + ".name", "\"\(job.name)\" names two stores; names must be unique")
            }
            jobs.append(job)
        }
        var configuration = BackupConfiguration(file: file, stores: jobs)
        configuration.stateDirectory = try top["state-directory"].map { try string($0, at: "state-directory") }
        configuration.proofKeyFile = try top["proof-key"].map { try string($0, at: "proof-key") }
        configuration.s3Endpoint = try top["s3-endpoint"].map { try string($0, at: "s3-endpoint") }
        configuration.caFile = try top["ca-file"].map { try string($0, at: "ca-file") }
        configuration.credentialsFile = try top["credentials"].map { try string($0, at: "credentials") }
        configuration.sshKey = try top["ssh-key"].map { try string($0, at: "ssh-key") }
        configuration.knownHosts = try top["known-hosts"].map { try string($0, at: "known-hosts") }
        if let node = top["retry-for"] {
            do {
                configuration.retryFor = try DurationText.parseSeconds(try string(node, at: "retry-for"))
            } catch StoreBackupError.invalidSchedule(let reason) {
                throw fail(node, "retry-for", reason)
            }
        }
        if let node = top["retain-days"] {
            let days = try count(node, at: "retain-days")
            guard days >= 1 else { throw fail(node, "retain-days", "must be a whole number of days ≥ 1") }
            var mode = ObjectLockRetention.Mode.governance
            if let modeNode = top["retain-mode"] {
                guard let parsed = ObjectLockRetention.Mode(text: try string(modeNode, at: "retain-mode")) else {
                    throw fail(modeNode, "retain-mode", "must be governance or compliance")
                }
                mode = parsed
            }
            configuration.objectLock = ObjectLockRetention(days: days, mode: mode)
        } else if let modeNode = top["retain-mode"] {
            throw fail(modeNode, "retain-mode", "needs retain-days: (how long to lock each backup)")
        }
        for (key, path) in [("limit-upload", \BackupConfiguration.limitUpload), ("limit-download", \BackupConfiguration.limitDownload)] {
            guard let node = top[key] else { continue }
            do {
                configuration[keyPath: path] = try RateLimit.parse(try string(node, at: key), option: key + ":").bytesPerSecond
            } catch StoreBackupError.invalidSchedule(let reason) {
                throw fail(node, key, reason)
            }
        }
        if let metricsNode = top["metrics"] {
            let metrics = try mapping(metricsNode, at: "metrics", allowed: ["file"])
            configuration.metricsFile = try metrics["file"].map { try string($0, at: "metrics.file") }
        }
        return configuration
    }

    /// One store, each setting taken from the store or else from the top-level default.
    func readStore(_ store: [String: Node], defaults: [String: Node], node: Node, at key: String) throws -> StoreJob {
        func setting(_ name: String) -> (Node, String)? {
            if let value = store[name] { return (value, key + "." + name) }
            if let value = defaults[name] { return (value, name) }
            return nil
        }
        guard let nameNode = store["name"] else { throw fail(node, key + ".name", "missing: each store needs a name") }
        let name = try string(nameNode, at: key + ".name")
        guard StoreJob.isValidName(name) else {
            throw fail(nameNode, key + ".name", "\"\(name)\" may only contain letters, digits, '.', '_' and '-'")
        }
        guard let pathNode = store["path"] else { throw fail(node, key + ".path", "missing: the stores directory to back up") }
        let path = try string(pathNode, at: key + ".path")
        guard !path.isEmpty else { throw fail(pathNode, key + ".path", "must not be empty") }

        guard let (scheduleNode, scheduleKey) = setting("schedule") else {
            throw fail(node, key + ".schedule", "missing: e.g. \"daily 02:30\", \"0 3 * * *\" or \"every 6h\"")
        }
        let schedule: Schedule
        do { schedule = try Schedule.parse(try string(scheduleNode, at: scheduleKey)) } catch StoreBackupError.invalidSchedule(let reason) {
            throw fail(scheduleNode, scheduleKey, reason)
        }
        var jitter: TimeInterval = 0
        if let (jitterNode, jitterKey) = setting("jitter") {
            do { jitter = try DurationText.parseSeconds(try string(jitterNode, at: jitterKey)) } catch StoreBackupError.invalidSchedule(
                let reason)
            {
                throw fail(jitterNode, jitterKey, reason)
            }
        }
        var level = CompressionLevel.default
        if let (levelNode, levelKey) = setting("level") {
            guard let parsed = CompressionLevel.parse(try string(levelNode, at: levelKey)) else {
                throw fail(levelNode, levelKey, "must be fast, default, best or a number from 0 to 9")
            }
            level = parsed
        }
        var threads: Int?
        if let (threadsNode, threadsKey) = setting("threads") {
            guard let parsed = Int(try string(threadsNode, at: threadsKey)), (1...StoreJob.maximumThreads).contains(parsed) else {
                throw fail(threadsNode, threadsKey, "must be a number from 1 to \(StoreJob.maximumThreads)")
            }
            threads = parsed
        }
        let (destination, mirrors) = try readDestinations(store, defaults: defaults, node: node, at: key)
        let retention = try setting("retention").map { try readRetention($0.0, at: $0.1) }
        var passwordFile: String?
        if let (encryptNode, encryptKey) = setting("encrypt") {
            let encrypt = try mapping(encryptNode, at: encryptKey, allowed: ["password-file"])
            guard let fileNode = encrypt["password-file"] else {
                throw fail(encryptNode, encryptKey + ".password-file", "missing: the file holding the archive password")
            }
            passwordFile = try string(fileNode, at: encryptKey + ".password-file")
        }
        let hooks = try setting("hooks").map { try readHooks($0.0, at: $0.1) } ?? BackupHooks()
        var job = StoreJob(
            name: name, storesDirectory: path, destination: destination, schedule: schedule, jitter: jitter,
            retention: retention, compressionLevel: level, passwordFile: passwordFile, hooks: hooks)
        job.mirrors = mirrors
        job.threads = threads
        job.appCommands = try readAppCommands(store, at: key)
        job.verify = try setting("verify").map { try readVerify($0.0, at: $0.1) }
        if let (flagNode, flagKey) = setting("verify-after-create") {
            switch try string(flagNode, at: flagKey).lowercased() {
            case "true", "yes", "on": job.verifyAfterCreate = true
            case "false", "no", "off": job.verifyAfterCreate = false
            default: throw fail(flagNode, flagKey, "must be true or false")
            }
        }
        job.incremental = try readIncremental(setting)
        if let (node, key) = setting("levels") {
            job.levels = try readLevels(node, at: key)
            if job.levels != nil && job.incremental == nil { throw fail(node, key, "is used only with incremental: true") }
        }
        if let (node, key) = setting("keep-replaced") {
            do { job.keepReplaced = try DurationText.parseSeconds(try string(node, at: key)) } catch StoreBackupError.invalidSchedule(
                let reason)
            {
                throw fail(node, key, reason)
            }
        }
        return job
    }

    /// `incremental: true` and its policy keys; nil when off. The policy keys without
    /// `incremental: true` are an error (they would silently do nothing).
    func readIncremental(_ setting: (String) -> (Node, String)?) throws -> IncrementalPolicy? {
        var enabled = false
        if let (flagNode, flagKey) = setting("incremental") {
            switch try string(flagNode, at: flagKey).lowercased() {
            case "true", "yes", "on": enabled = true
            case "false", "no", "off": enabled = false
            default: throw fail(flagNode, flagKey, "must be true or false")
            }
        }
        var policy = IncrementalPolicy()
        var policyKey: (Node, String)?
        if let (node, key) = setting("full-every") {
            policyKey = (node, key)
            do { policy.fullEvery = try DurationText.parseSeconds(try string(node, at: key)) } catch StoreBackupError.invalidSchedule(
                let reason)
            {
                throw fail(node, key, reason)
            }
            guard policy.fullEvery > 0 else { throw fail(node, key, "must be longer than 0") }
        }
        if let (node, key) = setting("max-chain") {
            policyKey = (node, key)
            guard let value = Int(try string(node, at: key)), value >= 0 else { throw fail(node, key, "must be a number, 0 or more") }
            policy.maxChainLength = value
        }
        if let (node, key) = setting("max-delta-share") {
            policyKey = (node, key)
            guard let value = Double(try string(node, at: key)), (0...1).contains(value) else {
                throw fail(node, key, "must be a number from 0 to 1, e.g. 0.5")
            }
            policy.maxDeltaShare = value
        }
        if let (node, key) = setting("full-scan-every") {
            policyKey = (node, key)
            do {
                policy.fullScanEvery = try DurationText.parseSeconds(try string(node, at: key))
            } catch StoreBackupError
                .invalidSchedule(let reason)
            {
                throw fail(node, key, reason)
            }
        }
        if setting("incremental") == nil, let (node, key) = policyKey {
            throw fail(node, key, "is used only with incremental: true")
        }
        return enabled ? policy : nil
    }

    /// `stop-command`, `start-command`, `stop-timeout`: how `restore` stops and starts this
    /// store's app around the swap (per store only: each app has its own).
    func readAppCommands(_ store: [String: Node], at key: String) throws -> AppCommands? {
        let stop = try store["stop-command"].map { try string($0, at: key + ".stop-command") }
        let start = try store["start-command"].map { try string($0, at: key + ".start-command") }
        guard let stop else {
            if let node = store["start-command"] ?? store["stop-timeout"] {
                throw fail(node, key + ".stop-command", "missing: start-command and stop-timeout go with a stop-command")
            }
            return nil
        }
        var commands = AppCommands(stop: stop, start: start)
        if let node = store["stop-timeout"] {
            do {
                commands.timeout = try DurationText.parseSeconds(try string(node, at: key + ".stop-timeout"))
            } catch StoreBackupError.invalidSchedule(let reason) {
                throw fail(node, key + ".stop-timeout", reason)
            }
            if !(commands.timeout > 0) { throw fail(node, key + ".stop-timeout", "must be more than 0 seconds") }
        }
        return commands
    }

    /// `verify: {schedule: "30 4 * * *", pick: rotate, destinations: all}`; pick defaults to
    /// newest, destinations to first.
    func readVerify(_ node: Node, at key: String) throws -> VerifyDrill {
        let values = try mapping(node, at: key, allowed: ["schedule", "pick", "destinations"])
        guard let scheduleNode = values["schedule"] else {
            throw fail(node, key + ".schedule", "missing: when to verify, e.g. \"daily 04:30\" or \"30 4 * * *\"")
        }
        var drill: VerifyDrill
        do {
            drill = VerifyDrill(schedule: try Schedule.parse(try string(scheduleNode, at: key + ".schedule")))
        } catch StoreBackupError.invalidSchedule(let reason) {
            throw fail(scheduleNode, key + ".schedule", reason)
        }
        if let pickNode = values["pick"] {
            do { drill.pick = try VerifyDrill.Pick.parse(try string(pickNode, at: key + ".pick")) } catch StoreBackupError.invalidSchedule(
                let reason)
            {
                throw fail(pickNode, key + ".pick", reason)
            }
        }
        if let placesNode = values["destinations"] {
            switch try string(placesNode, at: key + ".destinations").lowercased() {
            case "first": drill.everyDestination = false
            case "all": drill.everyDestination = true
            default: throw fail(placesNode, key + ".destinations", "must be first or all")
            }
        }
        return drill
    }

    /// `destination: A`, or `destinations: [A, B, …]` (each backup published to every one);
    /// a store's own setting, either key, replaces the top-level default. Returns the first
    /// destination and the others.
    func readDestinations(_ store: [String: Node], defaults: [String: Node], node: Node, at key: String) throws -> (String?, [String]) {
        let own = store["destination"] != nil || store["destinations"] != nil
        let source = own ? store : defaults
        let prefix = own ? key + "." : ""
        if source["destination"] != nil && source["destinations"] != nil {
            throw fail(source["destinations"], prefix + "destinations", "give either `destination` or `destinations`, not both")
        }
        if let single = source["destination"] {
            let value = try string(single, at: prefix + "destination")
            if value.isEmpty { throw fail(single, prefix + "destination", "must not be empty") }
            return (value, [])
        }
        guard let listNode = source["destinations"] else { return (nil, []) }
        guard case .sequence(let list) = listNode, !list.isEmpty else {
            throw fail(listNode, prefix + "destinations", "must be a non-empty list of destinations (paths or URLs)")
        }
        var values: [String] = []
        for (index, item) in list.enumerated() {
            let value = try string(item, at: prefix + "destinations[\(index)]")
            if value.isEmpty { throw fail(item, prefix + "destinations[\(index)]", "must not be empty") }
            if values.contains(value) { throw fail(item, prefix + "destinations[\(index)]", "\"\(value)\" is listed twice") }
            values.append(value)
        }
        return (values[0], Array(values.dropFirst()))
    }

    /// `levels: on` (the default spans), `off`, or `{minute: 24h, hourly: 7d, daily: 35d}`.
    func readLevels(_ node: Node, at key: String) throws -> PointLevelPolicy? {
        if case .scalar = node {
            switch try string(node, at: key).lowercased() {
            case "true", "yes", "on": return PointLevelPolicy()
            case "false", "no", "off": return nil
            default: throw fail(node, key, "must be on, off, or spans like {minute: 24h, hourly: 7d, daily: 35d}")
            }
        }
        var policy = PointLevelPolicy()
        for (name, value) in try mapping(node, at: key, allowed: ["minute", "hourly", "daily"]) {
            let path = key + "." + name
            let seconds: TimeInterval
            do { seconds = try DurationText.parseSeconds(try string(value, at: path)) } catch StoreBackupError.invalidSchedule(let reason) {
                throw fail(value, path, reason)
            }
            guard seconds > 0 else { throw fail(value, path, "must be longer than 0") }
            switch name {
            case "minute": policy.minuteSpan = seconds
            case "hourly": policy.hourlySpan = seconds
            default: policy.dailySpan = seconds
            }
        }
        return policy
    }

    func readRetention(_ node: Node, at key: String) throws -> RetentionPolicy {
        let values = try mapping(node, at: key, allowed: Set(Self.retentionKeys))
        var policy = RetentionPolicy()
        for (name, value) in values {
            let path = key + "." + name
            switch name {
            case "keep-last": policy.keepLast = try count(value, at: path)
            case "keep-hourly": policy.keepHourly = try count(value, at: path)
            case "keep-daily": policy.keepDaily = try count(value, at: path)
            case "keep-weekly": policy.keepWeekly = try count(value, at: path)
            case "keep-monthly": policy.keepMonthly = try count(value, at: path)
            case "keep-yearly": policy.keepYearly = try count(value, at: path)
            default:
                do { policy.keepWithin = try RetentionSpan.parse(try string(value, at: path)) } catch StoreBackupError.invalidSchedule(
                    let reason)
                {
                    throw fail(value, path, reason)
                }
            }
        }
        guard !policy.isEmpty else { throw fail(node, key, "gives no rule; use e.g. {keep-daily: 7, keep-weekly: 4}") }
        return policy
    }

    func readHooks(_ node: Node, at key: String) throws -> BackupHooks {
        let values = try mapping(node, at: key, allowed: ["on-success", "on-failure"])
        var hooks = BackupHooks()
        if let success = values["on-success"] { hooks.onSuccess = try readActions(success, at: key + ".on-success") }
        if let failure = values["on-failure"] { hooks.onFailure = try readActions(failure, at: key + ".on-failure") }
        return hooks
    }

    /// One action `{command: …}` / `{url: …}` (with an optional `timeout`), or a list of them.
    func readActions(_ node: Node, at key: String) throws -> [HookAction] {
        if case .sequence(let list) = node {
            return try list.enumerated().map { try readAction($0.element, at: key + "[\($0.offset)]") }
        }
        return [try readAction(node, at: key)]
    }

    func readAction(_ node: Node, at key: String) throws -> HookAction {
        let values = try mapping(node, at: key, allowed: ["command", "url", "timeout"])
        var timeout: TimeInterval = 30
        if let timeoutNode = values["timeout"] {
            do {
                timeout = try DurationText.parseSeconds(try string(timeoutNode, at: key + ".timeout"))
            } catch StoreBackupError.invalidSchedule(let reason) {
                throw fail(timeoutNode, key + ".timeout", reason)
            }
        }
        switch (values["command"], values["url"]) {
        case (let command?, nil):
            return HookAction(.command(try string(command, at: key + ".command")), timeout: timeout)
        case (nil, let url?):
            let text = try string(url, at: key + ".url")
            guard let scheme = URLComponents(string: text)?.scheme?.lowercased(), ["http", "https"].contains(scheme) else {
                throw fail(url, key + ".url", "must be an http:// or https:// URL")
            }
            return HookAction(.url(text), timeout: timeout)
        default:
            throw fail(node, key, "give either `command` or `url`")
        }
    }
}
