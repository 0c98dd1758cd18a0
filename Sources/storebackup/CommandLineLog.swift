import Foundation
import Logging
import StoreBackup

/// What the library logs, as the command line prints it: one `storebackup: …` line on
/// stderr per message (a recovered restore, a retry), at notice and above unless
/// `STOREBACKUP_LOG_LEVEL` (trace, debug, info, …) asks for more.
struct CommandLineLogHandler: LogHandler {
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let level = event.level
        var text = "storebackup: "
        switch level {
        case .notice: break
        case .warning: text += "warning: "
        case .error, .critical: text += "error: "
        default: text += "\(level): "
        }
        text += event.message.description
        // Notices are sentences of their own; details (metadata) only where more was asked for.
        if level < .notice {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            if !all.isEmpty { text += " (" + all.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")" }
        }
        ProgressPrinter.shared.finishLine()
        Terminal.info(text)
    }
}

extension Terminal {
    /// The logger handed to the library (helpers, destinations).
    static let logger: Logger = {
        let level = ProcessInfo.processInfo.environment["STOREBACKUP_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .notice
        return Logger(label: "storebackup") { _ in CommandLineLogHandler(logLevel: level) }
    }()
}
