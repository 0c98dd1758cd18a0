import ArgumentParser
import Foundation
import StoreBackup

struct LsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ls",
        abstract: "List the files, folders, links and databases inside a backup, from its manifest.",
        discussion: """
            One line per entry, sorted by path: type and permissions, size, modification time \
            (local time), path; folders end in "/", links show their target, databases are \
            marked. The count and total size follow on stderr. Give paths to list only those \
            files, or those folders and everything beneath them (as `extract` takes them); a \
            path the backup does not hold is an error.

            The list comes from the manifest inside the archive and nothing is checked against \
            the files' content (`verify` and `extract` do that). A backup without a manifest is \
            listed from its ZIP directory, with a warning. An encrypted backup needs its \
            password. A backup in a local folder is read in place; from a remote destination \
            only the archive's central directory and manifest are read, with ranged requests (a \
            server that ignores ranges: the archive is downloaded to a temporary file in TMPDIR, \
            then removed). The store is never touched.

            --json prints one object with these keys, always present: backup (the name), \
            manifest (false when listed from the ZIP directory), created, host and \
            storesDirectory (from the manifest, else null), and entries: an array of \
            {path (escaped as described in docs/names-and-metadata.md), type ("file", "directory", "symlink", "database" or "fifo"), size (bytes), mode \
            (permission bits as an octal string, e.g. "0644"), modified (ISO 8601 UTC), \
            linkTarget (links only, else null), sha256 (hex, null without a manifest), in (for an \
            incremental backup: the earlier backup of its chain whose archive holds the content, \
            or null when this backup's archive holds it)}. The text lines of such entries end in \
            [in <backup>]; a database rebuilt from page deltas is marked "patched".
            """)

    @Argument(help: ArgumentHelp("The backup's name, or \"latest\" (left out with --at).", valueName: "name"))
    var name: String?

    @OptionGroup var at: AtOption

    @Argument(help: ArgumentHelp("Only these paths inside the backup (files, or folders with everything beneath them).", valueName: "path"))
    var paths: [String] = []

    @OptionGroup var destination: DestinationOption

    @OptionGroup var password: PasswordOption

    @Flag(help: "Print JSON (keys described above).")
    var json = false

    func validate() throws {
        if name == nil && at.at == nil { throw ValidationError("Missing expected argument '<name>'") }
        try at.validate()
    }

    func run() async throws {
        let backups = BackupRepository(destination: try destination.resolve(), passwords: password.provider(confirm: false))
        var name = self.name ?? "latest", paths = self.paths
        if let moment = at.date() {
            // With --at every argument is a path.
            paths = (self.name.map { [$0] } ?? []) + paths
            name = await Terminal.runCancellable { try await backups.backup(at: moment).name }
        }
        let chosen = name, wanted = paths
        let contents = await Terminal.runCancellable { try await backups.contents(of: chosen, matching: wanted) }
        if !contents.hasManifest {
            Terminal.info(
                "storebackup: warning: backup \"\(contents.backupName)\" has no manifest; listed from its ZIP directory (not verifiable)")
        }
        if json {
            Terminal.output(try Self.json(contents))
            return
        }
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        let sizes = contents.entries.map { $0.type == "directory" ? "-" : Terminal.formatBytes($0.size) }
        let sizeWidth = sizes.map(\.count).max() ?? 0
        for (entry, size) in zip(contents.entries, sizes) {
            let padded = String(repeating: " ", count: sizeWidth - size.count) + size
            var line = "\(Self.permissions(entry))  \(padded)  \(formatter.string(from: entry.modified))  \(Self.visible(entry.path))"
            switch entry.type {
            case "directory": line += "/"
            case "symlink": line += " -> " + Self.visible(entry.linkTarget ?? "?")
            case "database": line += entry.patchedByPages ? "  (database, patched)" : "  (database)"
            default: break
            }
            if let holder = entry.storedIn { line += "  [in \(Self.visible(holder))]" }
            Terminal.output(line)
        }
        let total = contents.entries.filter { $0.type != "directory" }.reduce(Int64(0)) { $0 + $1.size }
        Terminal.info("\(contents.entries.count) entries, \(Terminal.formatBytes(total)) in \"\(contents.backupName)\"")
    }

    /// `drwxr-xr-x`, `-rw-r--r--`, `lrwxrwxrwx`, `prw-------`, `drwxrwxrwt`, `-rwsr-xr-x`, as `ls -l`.
    static func permissions(_ entry: BackupContents.Entry) -> String {
        let type =
            switch entry.type {
            case "directory": "d"
            case "symlink": "l"
            case "fifo": "p"
            default: "-"
            }
        var letters = Array("rwxrwxrwx").enumerated().map { entry.mode & (0o400 >> UInt32($0.offset)) != 0 ? $0.element : "-" }
        // set-user-ID, set-group-ID, sticky: in the execute column, lower case when executable.
        for (bit, column, letter) in [(UInt32(0o4000), 2, "s"), (0o2000, 5, "s"), (0o1000, 8, "t")] as [(UInt32, Int, Character)]
        where entry.mode & bit != 0 {
            letters[column] = letters[column] == "-" ? Character(letter.uppercased()) : letter
        }
        return type + String(letters)
    }

    /// Names come from an archive someone else may have written: control characters are
    /// shown escaped so they cannot act on the terminal.
    static func visible(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value) {
                result += String(format: "\\x%02x", scalar.value)
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    static func json(_ contents: BackupContents) throws -> String {
        let formatter = ISO8601DateFormatter()
        let entries: [[String: Any]] = contents.entries.map { entry in
            [
                "path": entry.path, "type": entry.type, "size": entry.size, "mode": String(format: "0%o", entry.mode),
                "modified": formatter.string(from: entry.modified),
                "linkTarget": entry.linkTarget ?? NSNull(), "sha256": entry.sha256 ?? NSNull(),
                "in": entry.storedIn ?? NSNull(),
            ]
        }
        let object: [String: Any] = [
            "backup": contents.backupName, "manifest": contents.hasManifest,
            "created": contents.createdAt.map { formatter.string(from: $0) } ?? NSNull(),
            "host": contents.hostName ?? NSNull(), "storesDirectory": contents.sourcePath ?? NSNull(),
            "entries": entries,
        ]
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])
        return String(decoding: data, as: UTF8.self)
    }
}
