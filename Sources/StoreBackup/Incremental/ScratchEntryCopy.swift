import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies a file's content out of an archive into a new scratch file, streamed, and checks
/// it against the manifest's row: its size and SHA-256 (the stream checks the CRC-32, and
/// an encrypted entry's authentication code, at its end).
enum ScratchEntryCopy {
    static func copy(
        _ entry: ArchiveEntry, of reader: ArchiveReader, expected: Manifest.File, to path: String, cancel: CancellationFlag
    ) throws {
        let mismatch = StoreBackupError.checksumMismatch(name: reader.backupName, entry: expected.path)
        guard entry.kind == .file, entry.size == expected.size else { throw mismatch }
        let read = try EntryChunks.stream(entry, of: reader)
        let output = try BufferedFileWriter(path: path, durable: false)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var hasher = SHA256()
        var copied: Int64 = 0
        while true {
            try cancel.throwIfCancelled()
            let got = try read(buffer)
            if got == 0 { break }
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<got])
            hasher.update(bufferPointer: bytes)
            try output.write(bytes)
            copied += Int64(got)
            guard copied <= expected.size else { throw mismatch }
        }
        _ = try output.finish()
        guard copied == expected.size, FileDigest.hex(hasher.finalize()) == expected.sha256 else { throw mismatch }
    }
}
