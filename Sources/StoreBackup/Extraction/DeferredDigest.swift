import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A database restore has written and checked against its CRC-32 and size, whose SHA-256
/// is checked afterwards by reading it back (from the page cache, where it still is).
///
/// Unpacking a database keeps every core busy (inflating, writing, hashing in order), and
/// its `PRAGMA integrity_check`, single-threaded and the longest step of a restore, can
/// only finish once the last block is in. Hashed on the way in, the SHA-256 of the whole
/// database lies on the path the check waits for; read back afterwards, it runs beside
/// the check on a core the check leaves idle. The check reads bytes not yet
/// matched to the manifest meanwhile, which it is made for (it reads damaged files), and
/// a mismatch fails the restore before anything is swapped in.
final class DeferredDigest {
    /// The entry, for messages.
    let entryPath: String
    private let path: String
    private let size: Int64
    private let expected: String
    private let descriptor: Int32

    /// Takes ownership of `descriptor`, which must be open for reading.
    init(owning descriptor: Int32, path: String, entryPath: String, size: Int64, expectedSHA256: String) {
        self.descriptor = descriptor
        self.path = path
        self.entryPath = entryPath
        self.size = size
        self.expected = expectedSHA256
    }

    deinit { close(descriptor) }

    /// Reads the file back and compares its SHA-256 with the manifest's.
    func verify(backupName: String, cancel: CancellationFlag) throws {
        var hasher = SHA256()
        try FileDigest.read(descriptor: descriptor, path: path, offset: 0, length: size) { _, bytes in
            try cancel.throwIfCancelled()
            hasher.update(bufferPointer: bytes)
        }
        guard FileDigest.hex(hasher.finalize()) == expected else {
            throw StoreBackupError.checksumMismatch(name: backupName, entry: entryPath)
        }
    }
}
