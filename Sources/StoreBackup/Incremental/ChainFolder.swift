import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The state folder of one store and one destination:
/// `<parent>/.<store name>.storebackup-chains/<key>/`, mode 0700, holding `state.json`,
/// the file list, the page maps and the last backup's manifest. A new state's files get new
/// names and `state.json` is replaced last (durably), so a crash leaves the old state or the
/// new one.
///
/// `state.json` is the state's JSON, a newline, and the hex SHA-256 of that JSON; the state
/// records the SHA-256 of each file it names. ``load()`` checks all of them: a bit flipped
/// anywhere makes the state unusable, and the next backup a full one.
struct ChainFolder: Sendable {
    let path: String
    let destination: String

    static let stateFile = "state.json"

    init(storesDirectory: String, destination: String) {
        let store = FileSystem.absolutePath(storesDirectory)
        let parent = FileSystem.parentDirectory(of: store)
        let root = parent + "/." + FileSystem.lastComponent(of: store) + ".storebackup-chains"
        path = root + "/" + Self.key(for: destination)
        self.destination = destination
    }

    /// A destination's folder name: the first 16 bytes of the SHA-256 of its display name, hex.
    static func key(for destination: String) -> String {
        FileDigest.hex(Array(SHA256.hash(data: Array(destination.utf8))).prefix(16))
    }

    /// The state and its files, or why there is none usable.
    enum Loaded: Sendable {
        case state(ChainState, files: [String: FileRecord])
        case none(reason: String)
    }

    func load() -> Loaded {
        let statePath = path + "/" + Self.stateFile
        guard FileSystem.fileExists(statePath) else { return .none(reason: "no chain state for this destination yet") }
        do {
            let data = try Data(contentsOf: URL(fileURLWithPath: statePath))
            guard let json = Self.checkedBody(data) else {
                return .none(reason: "the chain state at \(path) fails its checksum (damaged, or from another version)")
            }
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .utcTimestamp
            let state = try decoder.decode(ChainState.self, from: json)
            guard state.version == ChainState.currentVersion, state.destination == destination else {
                return .none(reason: "the chain state at \(path) is for another version or destination")
            }
            guard try fileSHA256(state.filesList) == state.filesListSHA256 else {
                return .none(reason: "the file list of the chain state at \(path) fails its checksum")
            }
            let files = try Self.readFilesList(path + "/" + state.filesList)
            var checked = state
            for (index, database) in state.databases.enumerated() {
                guard try fileSHA256(database.map) == database.mapSHA256 else {
                    return .none(reason: "the page map of \(database.path) in \(path) fails its checksum")
                }
                let map = try PageMapFile(path: path + "/" + database.map)
                guard map.pageSize == database.pageSize, map.pages == database.pages else {
                    return .none(reason: "the page map of \(database.path) in \(path) does not match the state")
                }
                // A quick map in doubt only costs its speed: every page is hashed instead.
                if let quick = database.quickMap, (try? fileSHA256(quick)) != database.quickMapSHA256 {
                    checked.databases[index].quickMap = nil
                }
            }
            return .state(checked, files: files)
        } catch {
            return .none(reason: "the chain state at \(path) is unreadable (\(error))")
        }
    }

    /// Only `state.json`, checked against its own checksum (not the files it names): enough
    /// to compare a fingerprint or read the chain's names, without reading the page maps.
    func peek() -> ChainState? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path + "/" + Self.stateFile)),
            let json = Self.checkedBody(data)
        else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .utcTimestamp
        guard let state = try? decoder.decode(ChainState.self, from: json), state.version == ChainState.currentVersion,
            state.destination == destination
        else { return nil }
        return state
    }

    /// The copy of the last backup's manifest that `state` names, checked against the
    /// manifest SHA-256 the state (and every incremental on that backup) records.
    func baseManifest(of state: ChainState) throws -> Manifest {
        let copy = path + "/" + state.baseManifest
        guard !state.baseManifest.isEmpty, FileSystem.fileExists(copy) else {
            throw StoreBackupError.unexpected(reason: "the chain state holds no copy of \(state.backupName)'s manifest")
        }
        let decoded = try Self.readManifestCopy(copy, of: state.backupName)
        guard decoded.sha256 == state.manifestSHA256 else {
            throw StoreBackupError.unexpected(reason: "the copy of \(state.backupName)'s manifest fails its checksum")
        }
        return decoded.manifest
    }

    /// The manifest copy at `copy` (backup `name`'s) and the hex SHA-256 of its bytes.
    static func readManifestCopy(_ copy: String, of name: String) throws -> (manifest: Manifest, sha256: String) {
        guard let input = FileHandle(forReadingAtPath: copy) else {
            throw StoreBackupError.io(path: copy, operation: "open", errno: errno)
        }
        defer { try? input.close() }
        // Decoded as it is read, as restore decodes manifests: a million rows without their text.
        let size = try FileSystem.lstatInfo(copy).st_size
        do {
            return try ManifestStreamDecoder.decode(
                maxBytes: Int(size), maxRows: 2 * ArchiveLimits.maxEntries, entries: []
            ) { buffer in
                let got = Glibc.read(input.fileDescriptor, buffer.baseAddress, buffer.count)
                guard got >= 0 else { throw StoreBackupError.io(path: copy, operation: "read", errno: errno) }
                return got
            }
        } catch is ManifestStreamDecoder.Failure {
            throw StoreBackupError.unexpected(reason: "the copy of \(name)'s manifest cannot be read")
        }
    }

    /// The JSON of a `state.json` whose last line is the SHA-256 of the rest; nil when it is not.
    private static func checkedBody(_ data: Data) -> Data? {
        let bytes = [UInt8](data)
        guard bytes.last == UInt8(ascii: "\n"), bytes.count > 66 else { return nil }
        let line = bytes[(bytes.count - 65)..<(bytes.count - 1)]
        guard bytes[bytes.count - 66] == UInt8(ascii: "\n") else { return nil }
        let body = Data(bytes[..<(bytes.count - 66)])
        return FileDigest.hex(SHA256.hash(data: body)) == String(decoding: line, as: UTF8.self) ? body : nil
    }

    private func fileSHA256(_ name: String) throws -> String {
        let file = path + "/" + name
        return try FileDigest.sha256(file: file, length: Int64(FileSystem.lstatInfo(file).st_size))
    }

    /// Makes the folder (0700) and removes what dead runs left in it.
    func prepare() throws {
        try FileSystem.createDirectories(FileSystem.parentDirectory(of: path), mode: 0o700)
        try FileSystem.createDirectories(path, mode: 0o700)
        ScratchFiles.sweep(path)
    }

    /// A scratch path in the folder (renamed into place by ``save(_:files:maps:manifest:)``).
    func scratchPath(purpose: String) -> String { ScratchFiles.path(in: path, purpose: purpose) }

    /// Writes the new state: the file list, the page maps and quick maps (scratch files in
    /// this folder, fsynced, by database path), the manifest's bytes, and last `state.json`;
    /// then removes the old state's files.
    @discardableResult
    func save(
        _ state: ChainState, files: [(path: String, record: FileRecord)], maps: [String: String],
        quickMaps: [String: String] = [:], manifest: Data
    ) throws -> ChainState {
        var state = state
        let generation = UUID().uuidString.prefix(8).lowercased()
        state.filesList = "files-\(generation).txt"
        // Streamed: a store of a million files has a list of a hundred megabytes.
        var listHash = SHA256()
        try writeNew(as: state.filesList) { writer in
            for (filePath, record) in files.sorted(by: { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }) {
                let s = record.stat
                let line = Array(
                    "\(filePath)\t\(s.size)\t\(s.mtimeNanoseconds)\t\(s.ctimeNanoseconds)\t\(s.inode)\t\(record.sha256)\n".utf8)
                listHash.update(data: line)
                try writer.write(line)
            }
        }
        state.filesListSHA256 = FileDigest.hex(listHash.finalize())
        state.baseManifest = "manifest-\(generation).json"
        try writeNew(as: state.baseManifest) { writer in try manifest.withUnsafeBytes { try writer.write($0) } }
        for index in state.databases.indices {
            guard let scratch = maps[state.databases[index].path] else {
                throw StoreBackupError.unexpected(reason: "no page map for \(state.databases[index].path)")
            }
            state.databases[index].map = "map-\(generation)-\(index).bin"
            try FileSystem.rename(from: scratch, to: path + "/" + state.databases[index].map)
            state.databases[index].mapSHA256 = try fileSHA256(state.databases[index].map)
            if let quick = quickMaps[state.databases[index].path] {
                let name = "quick-\(generation)-\(index).bin"
                try FileSystem.rename(from: quick, to: path + "/" + name)
                state.databases[index].quickMap = name
                state.databases[index].quickMapSHA256 = try fileSHA256(name)
            } else {
                state.databases[index].quickMap = nil
            }
        }
        try writeStateFile(state)
        return state
    }

    /// The same state as `source`'s folder holds (`state`, saved there), for another
    /// destination that received the same backup as `name` (`size` bytes): a mirror.
    func saveCopy(of state: ChainState, from source: ChainFolder, name: String, size: Int64) throws {
        try prepare()
        var copy = state
        copy.destination = destination
        copy.backupName = name
        copy.archiveSize = size
        // Its earlier links may carry other names there: that destination is listed instead.
        copy.links = nil
        copy.pointsUnlocked = nil
        for file in [state.filesList, state.baseManifest] + Self.mapFiles(of: state) {
            try Self.copyDurably(source.path + "/" + file, to: path + "/" + file, scratch: scratchPath(purpose: "copy"))
        }
        // The copies' checksums are the source's; load() checks them against these files.
        try writeStateFile(copy)
    }

    /// Copies `file` to `target` through `scratch` (fsynced, then renamed); the caller fsyncs
    /// the folder.
    static func copyDurably(_ file: String, to target: String, scratch: String) throws {
        do {
            guard let input = FileHandle(forReadingAtPath: file) else {
                throw StoreBackupError.io(path: file, operation: "open", errno: errno)
            }
            defer { try? input.close() }
            let writer = try BufferedFileWriter(path: scratch)
            while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
                try chunk.withUnsafeBytes { try writer.write($0) }
            }
            _ = try writer.finish()
            try FileSystem.rename(from: scratch, to: target)
        } catch {
            unlink(scratch)
            throw error
        }
    }

    /// A new file of the state, written to a scratch name, fsynced and renamed to `name`
    /// (the folder is fsynced with `state.json`).
    private func writeNew(as name: String, _ write: (BufferedFileWriter) throws -> Void) throws {
        let scratch = scratchPath(purpose: "state-file")
        do {
            let writer = try BufferedFileWriter(path: scratch)
            try write(writer)
            _ = try writer.finish()
            try FileSystem.rename(from: scratch, to: path + "/" + name)
        } catch {
            unlink(scratch)
            throw error
        }
    }

    /// fsyncs the folder (the new files' names), replaces `state.json` durably (its JSON,
    /// then its checksum line), then removes the files of the state it replaced.
    func writeStateFile(_ state: ChainState) throws {
        try FileSystem.fsync(path: path)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .utcTimestamp
        var data = try encoder.encode(state)
        data.append(contentsOf: Array(("\n" + FileDigest.hex(SHA256.hash(data: data)) + "\n").utf8))
        try DurableFile.write(data, to: path + "/" + Self.stateFile, mode: 0o600)
        // The old state's files: nothing refers to them any more.
        let keep = Set([Self.stateFile, state.filesList, state.baseManifest] + Self.mapFiles(of: state))
        for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        where !keep.contains(name) && ["files-", "map-", "quick-", "manifest-"].contains(where: { name.hasPrefix($0) }) {
            unlink(path + "/" + name)
        }
        // Spooled points the state no longer names (sent, or given up for a new chain).
        let waiting = Set((state.spooled ?? []).map(\.name))
        for name in (try? FileManager.default.contentsOfDirectory(atPath: spoolFolder)) ?? []
        where BackupName.isBackup(name) && !waiting.contains(name) {
            unlink(spoolFolder + "/" + name)
        }
    }

    /// The page maps and quick maps a state names.
    private static func mapFiles(of state: ChainState) -> [String] {
        state.databases.flatMap { [$0.map] + ($0.quickMap.map { [$0] } ?? []) }
    }

    /// Keeps `state` (as loaded) with a new fingerprint and scan time: the store was read and
    /// found as the state's backup holds it, and no backup was made.
    func recordScan(of state: ChainState, fingerprint: StoreFingerprint?, at time: Date) throws {
        var updated = state
        updated.fingerprint = fingerprint
        updated.scannedAt = time
        try writeStateFile(updated)
    }

    /// Keeps `state` with merged point `name` (`size` bytes, manifest bytes `manifest`) as the
    /// chain's newest backup in place of the points it merged: the same store, reached through
    /// a shorter chain (`links`, full first, ending with `name`). Files and page maps stay.
    func recordMergedPoint(
        of state: ChainState, name: String, size: Int64, manifest: Data, chainLength: Int, links: [PublishedLink]
    ) throws {
        var updated = state
        updated.backupName = name
        updated.archiveSize = size
        updated.manifestSHA256 = FileDigest.hex(SHA256.hash(data: manifest))
        updated.chainLength = chainLength
        updated.links = links
        updated.baseManifest = "manifest-\(UUID().uuidString.prefix(8).lowercased()).json"
        try writeNew(as: updated.baseManifest) { writer in try manifest.withUnsafeBytes { try writer.write($0) } }
        try writeStateFile(updated)
    }

    /// Forgets the chain (the next backup is a full one).
    func remove() { try? FileSystem.removeTree(path) }

    /// Lines `path TAB size TAB mtime-ns TAB ctime-ns TAB inode TAB sha256`, sorted by path.
    static func readFilesList(_ listPath: String) throws -> [String: FileRecord] {
        let data = try Data(contentsOf: URL(fileURLWithPath: listPath))
        var files: [String: FileRecord] = [:]
        for line in data.split(separator: UInt8(ascii: "\n")) {
            let fields = line.split(separator: UInt8(ascii: "\t"), omittingEmptySubsequences: false)
            guard fields.count == 6,
                let size = Int64(String(decoding: fields[1], as: UTF8.self)),
                let mtime = Int64(String(decoding: fields[2], as: UTF8.self)),
                let ctime = Int64(String(decoding: fields[3], as: UTF8.self)),
                let inode = UInt64(String(decoding: fields[4], as: UTF8.self)),
                fields[5].count == 64
            else { throw StoreBackupError.corruptArchive(name: listPath, reason: "a line of the file list is malformed") }
            files[String(decoding: fields[0], as: UTF8.self)] = FileRecord(
                stat: FileStat(size: size, mtimeNanoseconds: mtime, ctimeNanoseconds: ctime, inode: inode),
                sha256: String(decoding: fields[5], as: UTF8.self))
        }
        return files
    }
}
