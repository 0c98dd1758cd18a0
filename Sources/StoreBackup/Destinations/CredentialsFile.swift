import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes `NAME=value` credentials files (the format `DestinationOptions` reads).
package enum CredentialsFile {
    /// `~/.config/storebackup/credentials` for the given environment's HOME.
    package static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (environment["HOME"] ?? NSHomeDirectory()) + "/.config/storebackup/credentials"
    }

    /// Sets `values` in the file at `path`, keeping its other lines, replacing it
    /// atomically (a temporary beside it, fsync, rename) with mode 0600 from the first
    /// byte. Missing parent folders are created with mode 0700.
    package static func update(_ path: String, values: [(String, String)]) throws {
        for (name, value) in values where name.contains("=") || name.contains(where: \.isNewline) || value.contains(where: \.isNewline) {
            throw StoreBackupError.invalidDestination(url: path, reason: "cannot store \(name): names and values must be single lines")
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, !FileManager.default.fileExists(atPath: parent) {
            try FileManager.default.createDirectory(
                atPath: parent, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        var lines: [String] = []
        if FileManager.default.fileExists(atPath: path) {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw StoreBackupError.invalidDestination(url: path, reason: "credentials file cannot be read")
            }
            lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            if lines.last == "" { lines.removeLast() }
        }
        for (name, value) in values {
            let line = "\(name)=\(value)"
            if let index = lines.firstIndex(where: { key(of: $0) == name }) {
                lines[index] = line
                // A name given twice would be ambiguous: keep only the first.
                lines = lines.enumerated().filter { $0.offset <= index || key(of: $0.element) != name }.map(\.element)
            } else {
                lines.append(line)
            }
        }
        try writeAtomically(path, Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    private static func key(of line: String) -> String? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard !trimmed.hasPrefix("#"), let equals = trimmed.firstIndex(of: "=") else { return nil }
        return trimmed[..<equals].trimmingCharacters(in: .whitespaces)
    }

    /// Secrets are for the owner only: created 0600 (the umask can only narrow it).
    private static func writeAtomically(_ path: String, _ data: Data) throws {
        try DurableFile.write(data, to: path, mode: 0o600)
    }
}
