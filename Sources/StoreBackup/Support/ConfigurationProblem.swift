/// A configuration problem, located: `/etc/storebackup.yml:7: stores[0].schedule: …`; the
/// cause of ``StoreBackupError/invalidConfiguration(_:)``.
public struct ConfigurationProblem: Sendable, Equatable, CustomStringConvertible {
    /// The configuration file the problem is in, as its path was given (`<configuration>`
    /// for text parsed without a file name).
    public var file: String
    /// 1-based line, when known.
    public var line: Int?
    /// Where in the document, e.g. `stores[0].retention.keep-daily`.
    public var key: String?
    /// What is wrong, for the person editing the file, e.g. `must be a non-empty list of stores`.
    public var message: String

    /// A problem in `file`; `line` (1-based) and `key` are nil when not known.
    public init(file: String, line: Int?, key: String?, message: String) {
        self.file = file; self.line = line; self.key = key; self.message = message
    }

    /// The problem on one line: file, then line and key where known, then the message.
    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        if let key { text += ": \(key)" }
        return text + ": " + message
    }
}
