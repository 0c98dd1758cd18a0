/// A configuration problem, located: `/etc/storebackup.yml:7: stores[0].schedule: …`; the
/// cause of ``StoreBackupError/invalidConfiguration(_:)``.
public struct ConfigurationProblem: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    /// 1-based line, when known.
    public var line: Int?
    /// Where in the document, e.g. `stores[0].retention.keep-daily`.
    public var key: String?
    public var message: String

    public init(file: String, line: Int?, key: String?, message: String) {
        self.file = file; self.line = line; self.key = key; self.message = message
    }

    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        if let key { text += ": \(key)" }
        return text + ": " + message
    }
}
