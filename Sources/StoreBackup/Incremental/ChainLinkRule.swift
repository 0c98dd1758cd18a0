import Foundation

/// Whether an incremental fits onto its base, from the two manifests: the SHA-256 of the
/// base's manifest bytes equals what the incremental recorded, its chain length follows the
/// base's, every file it marks as the base's (`"source": "base"`) is the base's at the same
/// path with the same type, size and SHA-256, and every database it patches (`"pages"`) is
/// one of the base's with the same page size, its page delta present. Restore and verify
/// apply it to each link of a chain; create proves a new incremental by it before
/// publishing (``ChainBuild/prove(_:name:)``).
enum ChainLinkRule {
    /// Whether the incremental described by `manifest` (named `name`, holding a page delta
    /// for the paths `hasPageDelta` accepts) fits onto the backup `base` whose manifest is
    /// `baseManifest` (its bytes hashing to `baseManifestSHA256`): the rules restore and
    /// verify apply, and create proves a new incremental by before publishing it.
    static func check(
        _ manifest: Manifest, named name: String, hasPageDelta: (String) -> Bool, base: String, baseManifest: Manifest,
        baseManifestSHA256: String
    ) throws {
        guard let expected = manifest.base else { return }
        func broken(_ reason: String) -> StoreBackupError { .brokenChain(name: name, reason: reason) }
        guard baseManifestSHA256 == expected.manifestSHA256 else {
            throw broken("its base \"\(base)\" is not the backup it was made on (the base's manifest has another SHA-256)")
        }
        if let length = manifest.chainLength, let baseLength = baseManifest.chainLength, length != baseLength + 1 {
            throw broken("its chain length \(length) does not follow its base's \(baseLength)")
        }
        var baseFiles: [String: Manifest.File] = [:]
        for file in baseManifest.files { baseFiles[file.path] = file }
        let basePageSizes = Dictionary(baseManifest.databases.map { ($0.path, $0.pageSize) }) { first, _ in first }
        let pageSizes = Dictionary(manifest.databases.map { ($0.path, $0.pageSize) }) { first, _ in first }
        for file in manifest.files {
            switch file.source {
            case "base":
                guard let original = baseFiles[file.path] else {
                    throw broken("\(file.path) is marked as unchanged, but its base \"\(base)\" does not hold it")
                }
                guard original.type == file.type, isRegular(file.type), original.sha256 == file.sha256,
                    original.size == file.size, file.sha256 != nil
                else {
                    throw broken("\(file.path) is marked as unchanged, but its base \"\(base)\" holds other content there")
                }
            case "pages":
                guard let original = baseFiles[file.path], isRegular(original.type), let oldSize = basePageSizes[file.path] else {
                    throw broken("\(file.path) is patched by pages, but its base \"\(base)\" holds no such database")
                }
                guard let pageSize = pageSizes[file.path], pageSize == oldSize else {
                    throw broken(
                        "\(file.path) is patched by pages of \(pageSizes[file.path] ?? 0) bytes, but its base \"\(base)\" has pages of \(oldSize)"
                    )
                }
                guard hasPageDelta(file.path) else {
                    throw StoreBackupError.corruptArchive(name: name, reason: "the page delta of \(file.path) is missing")
                }
            default:
                continue
            }
        }
    }

    /// Files and databases are both regular files on disk.
    static func isRegular(_ type: String) -> Bool { type == "file" || type == "database" }
}
