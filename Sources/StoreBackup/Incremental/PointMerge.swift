import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The backup the merged point applies onto: a full or an earlier (merged) point.
struct PointMergeBase: Sendable {
    /// Its file name at the destination.
    var name: String
    /// Its manifest, decoded.
    var manifest: Manifest
    /// Hex SHA-256 of its manifest.json bytes (decrypted).
    var manifestSHA256: String
}

/// Merges consecutive points (incrementals) of a chain into one incremental on the oldest
/// one's base, so that a span of points (an hour, a day) can be kept as one restore point:
/// what a chain restore would build from them, written as an archive instead of a tree.
///
/// Each file of the newest part comes from where a chain restore takes it
/// (``PointMergePlan``): unchanged since the base stays the base's (`"source": "base"`);
/// patched by pages since the base gets one merged page delta and map (``MergedPageDelta``);
/// stored whole in a part is stored whole, rebuilt with the page deltas after that part
/// (``PageDeltaMerge``) and given a complete page map. Contents are streamed through scratch
/// files: no file is ever held in memory. The archive is then proven as create proves an
/// incremental (``ChainLinkRule``) and its tree checked against the newest part's.
enum PointMerge {
    /// Writes to `archivePath` one incremental on `base` holding what the `parts` (local archive
    /// files of consecutive incrementals, oldest first: parts[0]'s base is `base`, each next
    /// one's base is the one before) changed together; it restores to exactly the newest part's
    /// tree. Returns its manifest. Throws (and leaves no file at archivePath) if the parts do
    /// not form that chain (check each link with ChainLinkRule) or anything fails.
    static func merge(
        parts: [String], onto base: PointMergeBase, password: BackupPassword?,
        into archivePath: String, scratchDirectory: String, compressionLevel: Int,
        cancel: CancellationFlag
    ) throws -> Manifest {
        let name = FileSystem.lastComponent(of: archivePath)
        guard !parts.isEmpty else { throw StoreBackupError.unexpected(reason: "\(name): there are no points to merge") }
        guard !FileSystem.fileExists(archivePath) else {
            throw StoreBackupError.backupExists(name: name, destination: FileSystem.parentDirectory(of: archivePath))
        }
        let chain = try PointMergeParts.open(parts, onto: base, password: password, cancel: cancel)
        var contents = PointMergeContents(chain: chain, base: base, password: password, scratchDirectory: scratchDirectory, cancel: cancel)
        defer { contents.removeScratchFiles() }
        try contents.prepare()
        let newest = chain.newest.manifest
        var settings = ArchiveWriter.Settings(
            compressionLevel: compressionLevel, sourcePath: newest.sourcePath, createdAt: newest.createdAt, password: password)
        settings.hostName = newest.hostName
        settings.chain = contents.chainParts
        settings.storeManifest = newest
        let writer = ArchiveWriter(settings: settings, cancel: cancel, progress: ProgressThrottle(nil))
        do {
            _ = try writer.write(
                items: contents.items, snapshots: [:], outsideLinks: newest.outsideLinks ?? [], leftOut: newest.leftOut ?? [],
                to: archivePath)
            return try prove(archivePath, name: name, base: base, newest: chain.newest, password: password)
        } catch {
            unlink(archivePath)
            throw error
        }
    }

    /// Reads the written archive back and proves it: a link onto `base` by the rules restore
    /// applies, with the base and chain fields the merge gives it, and the newest part's tree.
    private static func prove(
        _ archivePath: String, name: String, base: PointMergeBase, newest: PointMergeParts.Part, password: BackupPassword?
    ) throws -> Manifest {
        let reader = try ArchiveReader(path: archivePath, backupName: name, passwords: password.map { .fixed($0) })
        func refuse(_ reason: String) -> StoreBackupError {
            .unexpected(reason: "refusing the merged point \(name), which would not restore as \(newest.name): \(reason)")
        }
        guard let merged = reader.manifest else { throw refuse("it has no manifest") }
        let expected = Manifest.Base(name: base.name, manifestSHA256: base.manifestSHA256, createdAt: base.manifest.createdAt)
        guard merged.kind == "incremental", merged.base == expected, merged.chainLength == (base.manifest.chainLength ?? 0) + 1,
            merged.createdAt == newest.manifest.createdAt, (reader.password != nil) == (password != nil)
        else { throw refuse("its chain fields are not the merge's") }
        do {
            try ChainLinkRule.check(
                merged, named: name, hasPageDelta: { reader.pageDeltas[$0] != nil }, base: base.name, baseManifest: base.manifest,
                baseManifestSHA256: base.manifestSHA256)
        } catch { throw refuse("\(error)") }
        guard merged.files.count == newest.manifest.files.count else { throw refuse("it lists another number of files") }
        var files: [String: Manifest.File] = [:]
        files.reserveCapacity(merged.files.count)
        for file in merged.files { files[file.path] = file }
        for file in newest.manifest.files {
            guard let row = files[file.path], row.type == file.type, row.size == file.size, row.sha256 == file.sha256,
                row.mode == file.mode, row.mtime == file.mtime, row.linkTarget == file.linkTarget
            else { throw refuse("it differs at \(file.path)") }
        }
        return merged
    }
}
