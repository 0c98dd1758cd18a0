/// One thing in the stores directory that goes into the archive.
///
/// A store of many small files has an item per file, alive until the archive is closed,
/// beside libzip's own entries. So an item is a fixed-size record of 48 bytes: its paths
/// are not strings of their own (two heap blocks per item) but its name in the scan's one
/// byte arena and its folder's number there (``StorePaths``); the relative and absolute
/// paths are made when asked for.
struct StoreItem: Sendable {
    enum Kind: String, Codable, Sendable { case directory, file, symlink, database, fifo }

    /// The arena holding this item's name, its folder's path and, for a link, its target.
    private let paths: StorePaths
    /// Where the name starts in `paths`.
    private let nameOffset: Int
    /// Modification time in whole seconds since 1970, UTC (negative before 1970).
    let modificationTime: Int64
    /// Bytes on disk when scanned (for a database, the snapshot's size replaces it).
    let size: Int64
    /// The folder's number in `paths` (``StorePaths/topLevel`` for the stores directory).
    private let folder: UInt32
    /// Permission bits with set-user-ID, set-group-ID and sticky (no file-type bits).
    let permissions: UInt32
    /// A link's target's length in `paths`, right after the name; -1 for no target.
    private let linkTargetLength: Int32
    private let nameLength: UInt16
    let kind: Kind
    /// (Files the scan sampled, see ``CompressibilitySample``.) Whether the content looks
    /// already compressed; nil when the scan took no sample.
    var looksIncompressible: Bool? = nil

    /// Path relative to the stores directory, "/"-separated, never starting with "/", in
    /// ``EscapedName``'s form (names are bytes; this keeps every byte).
    var relativePath: String { paths.relativePath(folder: folder, nameAt: nameOffset, count: Int(nameLength)) }

    /// The stores directory's path joined with ``relativePath``, escaped the same way: give
    /// it to system calls through ``EscapedName/withSystemPath(_:_:)``.
    var absolutePath: String { paths.absolutePath(relative: relativePath) }

    /// Where a link points, escaped like the paths (links only).
    var linkTarget: String? {
        linkTargetLength < 0 ? nil : paths.string(at: nameOffset + Int(nameLength), count: Int(linkTargetLength))
    }

    /// An item of a scan: its name (and target) go into the scan's arena.
    init(
        in paths: StorePaths, relativePath: String, kind: Kind, looksIncompressible: Bool? = nil, permissions: UInt32,
        modificationTime: Int64, size: Int64, linkTarget: String?
    ) {
        let stored = paths.append(relativePath, linkTarget)
        self.paths = paths
        folder = stored.folder
        nameOffset = stored.offset
        nameLength = UInt16(stored.nameCount)
        linkTargetLength = stored.targetCount.map(Int32.init) ?? -1
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

/// The names (and link targets) of a scan's items, as bytes in one arena of fixed-size
/// chunks: no heap block, header and rounding per path, and no copy when it grows (a
/// chunk, once full, is never moved). Each folder's relative path is kept once, by number:
/// the thousands of files of one folder do not each repeat it.
// Unchecked: appended to only by the scan, on one thread, before the items are shared.
final class StorePaths: @unchecked Sendable {
    /// The stores directory, escaped; items' absolute paths are `root + "/" + relative`.
    private let root: String
    /// For an arena of one item outside the store: its absolute path, whatever the relative one.
    private let wholePath: String?
    private var chunks: [UnsafeMutablePointer<UInt8>] = []
    /// The folders' relative paths, by number, and their numbers by path.
    private var folders: [String] = []
    private var folderNumbers: [String: UInt32] = [:]
    /// The folder of the last item appended: a folder's items mostly come one after another.
    private var lastFolder: (path: Substring, number: UInt32)?
    /// The folder number of items directly in the stores directory.
    static let topLevel = UInt32.max
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

    /// Stores the name of `relativePath` (its folder by number), then `target` right after
    /// it, in one chunk; returns the folder's number, where the name starts (chunk × chunk
    /// size + offset) and the lengths.
    func append(_ relativePath: String, _ target: String?) -> (
        folder: UInt32, offset: Int, nameCount: Int, targetCount: Int?
    ) {
        let slash = relativePath.utf8.lastIndex(of: UInt8(ascii: "/"))
        let name = slash.map { relativePath[relativePath.utf8.index(after: $0)...] } ?? relativePath[...]
        let folder = slash.map { number(ofFolder: relativePath[..<$0]) } ?? Self.topLevel
        let nameCount = name.utf8.count
        precondition(nameCount <= Int(UInt16.max), "a name longer than any file system's")
        let targetCount = target?.utf8.count
        let total = nameCount + (targetCount ?? 0)
        if chunks.isEmpty || used + total > Self.chunkSize {
            // A name and target longer than a chunk get a chunk of their own size, at the
            // next chunk-sized position, and fill it.
            chunks.append(.allocate(capacity: max(Self.chunkSize, total)))
            used = 0
        }
        let offset = (chunks.count - 1) * Self.chunkSize + used
        let chunk = chunks[chunks.count - 1] + used
        copy(String(name), to: chunk)
        if let target { copy(target, to: chunk + nameCount) }
        used = min(Self.chunkSize, used + total)
        return (folder, offset, nameCount, targetCount)
    }

    private func number(ofFolder path: Substring) -> UInt32 {
        if let lastFolder, lastFolder.path == path { return lastFolder.number }
        let folder = String(path)
        let number: UInt32
        if let known = folderNumbers[folder] {
            number = known
        } else {
            number = UInt32(folders.count)
            folders.append(folder)
            folderNumbers[folder] = number
        }
        lastFolder = (path, number)
        return number
    }

    func relativePath(folder: UInt32, nameAt offset: Int, count: Int) -> String {
        guard folder != Self.topLevel else { return string(at: offset, count: count) }
        var folderPath = folders[Int(folder)]
        return folderPath.withUTF8 { folderBytes in
            String(unsafeUninitializedCapacity: folderBytes.count + 1 + count) { buffer in
                _ = buffer.initialize(from: folderBytes)
                buffer[folderBytes.count] = UInt8(ascii: "/")
                let name = chunks[offset / Self.chunkSize] + offset % Self.chunkSize
                UnsafeMutableBufferPointer(rebasing: buffer[(folderBytes.count + 1)...]).baseAddress!
                    .update(from: name, count: count)
                return folderBytes.count + 1 + count
            }
        }
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
