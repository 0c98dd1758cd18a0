import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Dropbox's `content_hash`, as published in its API documentation: split the data into
/// 4 MiB blocks, take the SHA-256 of each, then the SHA-256 of the concatenated block
/// digests, written as lowercase hex. Fed incrementally, so a file of any size is hashed
/// with a small, fixed amount of memory.
struct DropboxContentHasher {
    static let blockSize = 4 << 20

    private var overall = SHA256()
    private var block = SHA256()
    private var bytesInBlock = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(rest.count, Self.blockSize - bytesInBlock)
            block.update(bufferPointer: UnsafeRawBufferPointer(rebasing: rest.prefix(take)))
            bytesInBlock += take
            rest = rest.dropFirst(take)
            if bytesInBlock == Self.blockSize { closeBlock() }
        }
    }

    /// The hex digest of everything fed so far (the hasher itself is left as it was).
    func finalize() -> String {
        var copy = self
        if copy.bytesInBlock > 0 { copy.closeBlock() }
        return FileDigest.hex(copy.overall.finalize())
    }

    private mutating func closeBlock() {
        let digest = block.finalize()
        digest.withUnsafeBytes { overall.update(bufferPointer: $0) }
        block = SHA256()
        bytesInBlock = 0
    }

    /// The content hash of a slice of a file.
    static func hash(file: String, offset: Int64 = 0, length: Int64) throws -> String {
        var hasher = DropboxContentHasher()
        try FileDigest.read(file: file, offset: offset, length: length) { _, bytes in hasher.update(bytes) }
        return hasher.finalize()
    }
}

/// The content hash of a whole file built up while its slices are sent, in whatever
/// order a resumed upload sends them: bytes are taken in file order only, each once, so
/// a slice sent again (after `incorrect_offset`) is not counted twice and a slice the
/// server already had is read to catch up.
struct DropboxFileHashTracker {
    let file: String
    private(set) var hashedUpTo: Int64 = 0
    private var hasher = DropboxContentHasher()

    init(file: String) { self.file = file }

    /// Hashes `[offset, offset + length)` as its own content hash (what Dropbox checks for
    /// one request) and, from the same read, extends the whole-file hash.
    mutating func hashSlice(offset: Int64, length: Int64) throws -> String {
        if hashedUpTo < offset {
            try FileDigest.read(file: file, offset: hashedUpTo, length: offset - hashedUpTo) { _, bytes in
                hasher.update(bytes)
            }
            hashedUpTo = offset
        }
        var slice = DropboxContentHasher()
        var whole = hasher
        var wholeUpTo = hashedUpTo
        try FileDigest.read(file: file, offset: offset, length: length) { at, bytes in
            slice.update(bytes)
            let end = at + Int64(bytes.count)
            if end > wholeUpTo {
                let skip = Int(max(0, wholeUpTo - at))
                whole.update(UnsafeRawBufferPointer(rebasing: bytes[skip...]))
                wholeUpTo = end
            }
        }
        hasher = whole
        hashedUpTo = wholeUpTo
        return slice.finalize()
    }

    /// The whole file's content hash, once every byte up to `size` went through.
    mutating func finish(size: Int64) throws -> String {
        if hashedUpTo < size {
            try FileDigest.read(file: file, offset: hashedUpTo, length: size - hashedUpTo) { _, bytes in
                hasher.update(bytes)
            }
            hashedUpTo = size
        }
        return hasher.finalize()
    }
}
