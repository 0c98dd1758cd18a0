import Foundation

/// The archive paths `extract` and `ls` were asked for: each names one entry, or a folder
/// and everything beneath it. No paths select the whole backup.
struct EntrySelection: Sendable {
    /// The requested paths, normalised (no leading `./`, no trailing `/`); empty: everything.
    let paths: [String]

    /// Normalises `requested`: `./a/b/` is `a/b`; `.` or an empty path selects everything.
    init(_ requested: [String]) {
        var paths: [String] = []
        for path in requested {
            // Typed or pasted from `ls`: escapes decoded, then in the one escaped form (EscapedName).
            var text = EscapedName.canonical(path)
            while text.hasPrefix("./") { text.removeFirst(2) }
            while text.hasSuffix("/") { text.removeLast() }
            if text.isEmpty || text == "." { paths = []; break }
            if !paths.contains(text) { paths.append(text) }
        }
        self.paths = paths
    }

    var selectsEverything: Bool { paths.isEmpty }

    /// True when `path` is a requested path or lies beneath one.
    func contains(_ path: String) -> Bool {
        selectsEverything || paths.contains { path == $0 || path.hasPrefix($0 + "/") }
    }

    /// True when `path` must be written for the selection: selected, or a folder on the way
    /// to a selected path (so it gets its own mode and time rather than a default).
    func needs(_ path: String) -> Bool {
        contains(path) || paths.contains { $0.hasPrefix(path + "/") }
    }

    /// Throws ``StoreBackupError/notInBackup(name:paths:)`` naming every requested path
    /// that matches none of `present`.
    func requireMatches(in present: some Collection<String>, backupName: String) throws {
        guard !selectsEverything else { return }
        let missing = paths.filter { wanted in !present.contains { $0 == wanted || $0.hasPrefix(wanted + "/") } }
        if !missing.isEmpty { throw StoreBackupError.notInBackup(name: backupName, paths: missing) }
    }
}
