import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Local copies for compaction (docs/levels.md): with levels on, each point published is
/// also kept in `points/` beside the chain state until its day's points are merged, and the
/// manifest of every backup of the chain is kept as `<name>.manifest`, so merging an hour or
/// a day downloads nothing that was uploaded. Copies are a convenience: a lost one is fetched
/// from the destination instead.
extension ChainFolder {
    /// The folder of local copies.
    var pointsFolder: String { path + "/points" }

    /// Where the local copy of point `name` is kept.
    func pointCopyPath(of name: String) -> String { pointsFolder + "/" + name }

    /// Where the manifest of backup `name` is kept.
    func manifestCopyPath(of name: String) -> String { pointsFolder + "/" + name + ".manifest" }

    /// A scratch name in the points folder (the folder made), for a copy not yet named.
    func pointScratchPath(purpose: String) throws -> String {
        try FileSystem.createDirectories(pointsFolder, mode: 0o700)
        _ = ScratchFiles.sweep(pointsFolder)
        return ScratchFiles.path(in: pointsFolder, purpose: purpose)
    }

    /// Takes a copy of `archive` under a scratch name before publishing moves it: a hard link
    /// where the two share a file system, else a copy. Nil when no copy could be made (the
    /// point is still published; compaction then downloads it).
    func holdPointCopy(of archive: String) -> String? {
        guard let scratch = try? pointScratchPath(purpose: "point") else { return nil }
        if link(archive, scratch) == 0 { return scratch }
        do {
            try Self.copyDurably(archive, to: scratch, scratch: ScratchFiles.path(in: pointsFolder, purpose: "point-copy"))
            return scratch
        } catch {
            unlink(scratch)
            return nil
        }
    }

    /// Names the held copy `scratch` as point `name`, durably.
    func keepPointCopy(_ scratch: String, as name: String) throws {
        let descriptor = open(scratch, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: scratch, operation: "open", errno: errno) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw StoreBackupError.io(path: scratch, operation: "fsync", errno: errno) }
        try FileSystem.rename(from: scratch, to: pointCopyPath(of: name))
        try FileSystem.fsync(path: pointsFolder)
    }

    /// Keeps `manifest` (a backup's manifest bytes, decrypted) as backup `name`'s.
    func keepManifestCopy(_ manifest: Data, of name: String) throws {
        try FileSystem.createDirectories(pointsFolder, mode: 0o700)
        try DurableFile.write(manifest, to: manifestCopyPath(of: name), mode: 0o600)
    }

    /// Backup `name`'s kept manifest and the hex SHA-256 of its bytes; nil when none is kept.
    func manifestCopy(of name: String) -> (manifest: Manifest, sha256: String)? {
        let copy = manifestCopyPath(of: name)
        guard FileSystem.fileExists(copy) else { return nil }
        return try? Self.readManifestCopy(copy, of: name)
    }

    /// Removes the copies no longer needed: manifests of backups outside `links`, and point
    /// copies outside `links` or of an earlier UTC day than the newest link (a day's points are
    /// merged when the next day's first run comes).
    func dropPointCopies(keeping links: [String]) {
        guard let newest = links.last.flatMap(BackupName.date(of:)) else { return }
        let day = PointLevels.day(of: newest)
        let named = Set(links)
        let copies = Set(
            links.filter { BackupName.isIncremental($0) && BackupName.date(of: $0).map(PointLevels.day(of:)) == day })
        for name in (try? FileManager.default.contentsOfDirectory(atPath: pointsFolder)) ?? [] where !name.hasPrefix(".") {
            let keep = name.hasSuffix(".manifest") ? named.contains(String(name.dropLast(".manifest".count))) : copies.contains(name)
            if !keep { unlink(pointsFolder + "/" + name) }
        }
    }
}
