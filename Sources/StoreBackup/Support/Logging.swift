import Logging

extension Logger {
    /// Drops everything: the default wherever no logger was given, so the library stays
    /// silent (it never writes to stdout or stderr itself).
    @usableFromInline
    static let disabled = Logger(label: "storebackup", factory: { _ in SwiftLogNoOpLogHandler() })
}
