import Crypto
import Foundation

/// Who made a backup: the host and the stores directory, as its manifest records them.
public struct BackupOrigin: Sendable, Codable, Hashable, CustomStringConvertible {
    /// The host name the backup was made on, as create recorded it (`$STOREBACKUP_HOSTNAME`
    /// when set, else the machine's name): see ``currentHost``.
    public var host: String
    /// The absolute path of the stores directory that was backed up.
    public var storesDirectory: String

    /// An origin; ``BackupOriginIndex`` reads them from backups' manifests.
    public init(host: String, storesDirectory: String) {
        self.host = host
        self.storesDirectory = storesDirectory
    }

    /// `host:storesDirectory`, as `prune` names each group of backups it applies retention to.
    public var description: String { "\(host):\(storesDirectory)" }

    /// This machine (or `$STOREBACKUP_HOSTNAME`), as create records it.
    public static var currentHost: String { FileSystem.hostName }
}

/// Finds the origin of each backup in a destination, so several machines and stores can
/// share one destination and `list --host` and retention can tell their backups apart.
///
/// Backup names carry only a date, so the origin comes from the manifest inside the
/// archive. For a local folder that is cheap: the archive is opened in place. A remote
/// backup would have to be downloaded, so origins are cached (by destination, name and
/// size; backups never change) in the state folder: backups made by this machine are
/// recorded when they are created, and others are read once, only when `download` is
/// allowed (`prune`, the scheduler's retention), never for a plain `list`.
public struct BackupOriginIndex: Sendable {
    /// The destination whose backups it looks at; its display name also keys the cache.
    public let destination: any BackupDestination
    /// Where the cache lives; nil: no cache.
    public let cacheDirectory: String?
    /// Opens the manifests of encrypted backups; without it (or with a password that does
    /// not fit) their origin is unknown unless cached.
    public let passwords: PasswordProvider?

    /// An index of `destination`'s backups that caches origins under `cacheDirectory` (nil:
    /// no cache) and opens encrypted manifests with `passwords`.
    public init(destination: any BackupDestination, cacheDirectory: String?, passwords: PasswordProvider? = nil) {
        self.destination = destination
        self.cacheDirectory = cacheDirectory
        self.passwords = passwords
    }

    struct CacheEntry: Codable { var size: Int64; var origin: BackupOrigin }

    var cachePath: String? {
        guard let cacheDirectory else { return nil }
        let digest = FileDigest.hex(SHA256.hash(data: Data(destination.displayName.utf8)))
        return cacheDirectory + "/origins/" + digest.prefix(16) + ".json"
    }

    func loadCache() -> [String: CacheEntry] {
        guard let path = cachePath, let data = FileManager.default.contents(atPath: path) else { return [:] }
        return (try? JSONDecoder().decode([String: CacheEntry].self, from: data)) ?? [:]
    }

    func saveCache(_ cache: [String: CacheEntry]) {
        guard let path = cachePath, let data = try? JSONEncoder().encode(cache) else { return }
        let folder = FileSystem.parentDirectory(of: path)
        try? FileSystem.createDirectories(folder, mode: 0o700)
        ScratchFiles.sweep(folder)
        try? DurableFile.write(data, to: path)
    }

    /// Remembers the origin of a backup this process just made (no download needed later).
    func record(name: String, size: Int64, manifest: Manifest) {
        guard cachePath != nil else { return }
        var cache = loadCache()
        cache[name] = CacheEntry(size: size, origin: BackupOrigin(host: manifest.hostName, storesDirectory: manifest.sourcePath))
        saveCache(cache)
    }

    /// The origin of each listed backup, by name; nil where it cannot be known cheaply
    /// (remote, not cached, `download` false) or at all (no readable manifest, e.g. the
    /// seed app's archives).
    public func origins(of backups: [BackupListing], download: Bool) async -> [String: BackupOrigin?] {
        var cache = loadCache()
        var changed = false
        var result: [String: BackupOrigin?] = [:]
        for backup in backups {
            if let entry = cache[backup.name], entry.size == backup.size {
                result[backup.name] = entry.origin
                continue
            }
            var origin: BackupOrigin?
            if let path = destination.localPath(of: backup.name) {
                origin = readOrigin(archive: path, name: backup.name)
            } else if download {
                origin = await downloadOrigin(backup.name)
                if let origin {
                    cache[backup.name] = CacheEntry(size: backup.size, origin: origin)
                    changed = true
                }
            }
            result[backup.name] = origin
        }
        // Forget backups that are gone, so the cache stays as small as the destination.
        let names = Set(backups.map(\.name))
        if cache.keys.contains(where: { !names.contains($0) }) {
            cache = cache.filter { names.contains($0.key) }
            changed = true
        }
        if changed { saveCache(cache) }
        return result
    }

    func readOrigin(archive path: String, name: String) -> BackupOrigin? {
        guard let manifest = (try? ArchiveReader(path: path, backupName: name, passwords: passwords))?.manifest else { return nil }
        return BackupOrigin(host: manifest.hostName, storesDirectory: manifest.sourcePath)
    }

    private func downloadOrigin(_ name: String) async -> BackupOrigin? {
        let temporary = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "origin", suffix: ".zip")
        defer { unlink(temporary) }
        do {
            try await destination.download(name, to: temporary, progress: nil)
        } catch {
            return nil
        }
        return readOrigin(archive: temporary, name: name)
    }
}
