import Foundation

/// How a diff reaches the databases of each side: as URIs that `ATTACH` opens read-only.
enum DiffDatabaseSources {
    /// A live database, read-only: SQLite's own locking, so a writer can go on and the diff
    /// still reads one committed state (its read transaction).
    static func live(_ path: String) -> String {
        "file:" + uriPath(path) + "?mode=ro"
    }

    /// The databases `paths` of backup `name`, by path, as URIs a diff attaches; `close`
    /// releases them.
    ///
    /// THE SEAM for the read-only backup VFS: today each database is extracted (checked as
    /// `extract` checks it) into a private scratch folder in `TMPDIR` that `close` removes.
    /// When `BackupRepository.openDatabase` lands, this is the one function to switch: open
    /// each path through it and return its `file:…?vfs=…&immutable=1` URI, keeping the
    /// opened backup alive until `close`. Nothing else in the diff knows how a backup's
    /// database was opened.
    static func openBackup(
        _ repository: BackupRepository, name: String, paths: [String]
    ) async throws -> (uris: [String: String], close: @Sendable () -> Void) {
        guard !paths.isEmpty else { return ([:], {}) }
        ScratchFiles.sweep(ScratchFiles.temporaryDirectory)
        let scratch = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "diff")
        let close: @Sendable () -> Void = { try? FileSystem.removeTree(scratch) }
        do {
            _ = try await repository.extract(name, paths: paths, into: scratch)
        } catch {
            close()
            throw error
        }
        var uris: [String: String] = [:]
        for path in paths {
            // An extracted copy nobody else writes: no locks, no -shm file.
            uris[path] = "file:" + uriPath(scratch + "/" + path) + "?mode=ro&immutable=1"
        }
        return (uris, close)
    }

    /// A path's bytes for a `file:` URI: unreserved ASCII and `/` as they are, every other
    /// byte `%XX`. `path` is in ``EscapedName``'s form (its raw bytes are what is opened).
    static func uriPath(_ path: String) -> String {
        var result = ""
        for byte in EscapedName.bytes(path) {
            let scalar = Unicode.Scalar(byte)
            let plain =
                byte < 0x80 && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "-._~/".unicodeScalars.contains(scalar))
            if plain { result.unicodeScalars.append(scalar) } else { result += String(format: "%%%02X", byte) }
        }
        return result
    }
}
