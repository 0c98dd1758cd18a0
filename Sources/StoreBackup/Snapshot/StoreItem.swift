/// One thing in the stores directory that goes into the archive.
///
/// A store of many small files has an item per file, alive until the archive is closed,
/// beside libzip's own entries. So an item is a fixed-size record of 48 bytes: its paths
/// are not strings of their own (two heap blocks per item) but a range in the scan's one
/// byte arena (``StorePaths``), and the absolute path is made when asked for.
struct StoreItem: Sendable {
    enum Kind: String, Codable, Sendable { case directory, file, symlink, database, fifo }

    /// The arena holding this item's relative path and, for a link, its target.
    private let paths: StorePaths
    /// Where the relative path starts in `paths`.
    private let pathOffset: Int
    /// Modification time in whole seconds since 1970, UTC (negative before 1970).
    let modificationTime: Int64
    /// Bytes on disk when scanned (for a database, the snapshot's size replaces it).
    let size: Int64
    private let pathLength: UInt32
    /// Permission bits with set-user-ID, set-group-ID and sticky (no file-type bits).
    let permissions: UInt32
    /// A link's target's length in `paths`, right after the relative path; -1 for no target.
    private let linkTargetLength: Int32
    let kind: Kind
    /// (Files the scan sampled, see ``CompressibilitySample``.) Whether the content looks
    /// already compressed; nil when the scan took no sample.
    var looksIncompressible: Bool? = nil

    /// Path relative to the stores directory, "/"-separated, never starting with "/", in
    /// ``EscapedName``'s form (names are bytes; this keeps every byte).
    var relativePath: String { paths.string(at: pathOffset, count: Int(pathLength)) }

    /// The stores directory's path joined with ``relativePath``, escaped the same way: give
    /// it to system calls through ``EscapedName/withSystemPath(_:_:)``.
    var absolutePath: String { paths.absolutePath(relative: relativePath) }

    /// Where a link points, escaped like the paths (links only).
    var linkTarget: String? {
        linkTargetLength < 0 ? nil : paths.string(at: pathOffset + Int(pathLength), count: Int(linkTargetLength))
    }

    /// An item of a scan: its paths go into the scan's arena.
    init(
        in paths: StorePaths, relativePath: String, kind: Kind, looksIncompressible: Bool? = nil, permissions: UInt32,
        modificationTime: Int64, size: Int64, linkTarget: String?
    ) {
        let (offset, pathCount, targetCount) = paths.append(relativePath, linkTarget)
        self.paths = paths
        pathOffset = offset
        pathLength = UInt32(pathCount)
        linkTargetLength = targetCount.map(Int32.init) ?? -1
        self.kind = kind
        self.looksIncompressible = looksIncompressible
        self.permissions = permissions
        self.modificationTime = modificationTime
        self.size = size
    }

    /// An item outside any scan (a chain's extra entries), at `absolutePath`.
    init(
        relativePath: String, absolutePath: String, kind: Kind, looksIncompressible: Bool? = nil, permissions: UInt32,
        modificationTime: Int64, size: Int64, linkTarget: String?
    ) {
        self.init(
            in: StorePaths(wholePath: absolutePath), relativePath: relativePath, kind: kind,
            looksIncompressible: looksIncompressible, permissions: permissions, modificationTime: modificationTime,
            size: size, linkTarget: linkTarget)
    }
}

/// The relative paths (and link targets) of a scan's items, as bytes in one arena of
/// fixed-size chunks: no heap block, header and rounding per path, and no copy when it
/// grows (a chunk, once full, is never moved).
// Unchecked: appended to only by the scan, on one thread, before the items are shared.
final class StorePaths: @unchecked Sendable {
    /// The stores directory, escaped; items' absolute paths are `root + "/" + relative`.
    private let root: String
    /// For an arena of one item outside the store: its absolute path, whatever the relative one.
    private let wholePath: String?
    private var chunks: [UnsafeMutablePointer<UInt8>] = []
    private var used = 0
    private static let chunkSize = 256 << 10

    init(root: String) {
        self.root = root
        wholePath = nil
    }

    init(wholePath: String) {
        root = ""
        self.wholePath = wholePath
    }

    deinit { chunks.forEach { $0.deallocate() } }

    func absolutePath(relative: String) -> String { wholePath ?? root + "/" + relative }

    /// Stores `path`, then `target` right after it, in one chunk; returns where they start
    /// (chunk × chunk size + offset) and their lengths.
    func append(_ path: String, _ target: String?) -> (offset: Int, pathCount: Int, targetCount: Int?) {
        let pathCount = path.utf8.count
        let targetCount = target?.utf8.count
        let total = pathCount + (targetCount ?? 0)
        if chunks.isEmpty || used + total > Self.chunkSize {
            // A path longer than a chunk (escaped names can be) gets a chunk of its own size,
            // at the next chunk-sized position, and fills it.
            chunks.append(.allocate(capacity: max(Self.chunkSize, total)))
            used = 0
        }
        let offset = (chunks.count - 1) * Self.chunkSize + used
        let chunk = chunks[chunks.count - 1] + used
        copy(path, to: chunk)
        if let target { copy(target, to: chunk + pathCount) }
        used = min(Self.chunkSize, used + total)
        return (offset, pathCount, targetCount)
    }

    private func copy(_ text: String, to destination: UnsafeMutablePointer<UInt8>) {
        var text = text
        text.withUTF8 { bytes in
            guard let base = bytes.baseAddress else { return }
            destination.update(from: base, count: bytes.count)
        }
    }

    func string(at offset: Int, count: Int) -> String {
        let chunk = chunks[offset / Self.chunkSize]
        return String(decoding: UnsafeBufferPointer(start: chunk + offset % Self.chunkSize, count: count), as: UTF8.self)
    }
}
