import CZip
import Foundation

/// Serves the manifest, the archive's last entry, already deflated.
///
/// The manifest's writer is made when libzip reaches it (every other entry is written by
/// then, so every checksum is known); its rows are made as they are written, from the
/// archive's compact per-entry state. Its text is made part by part (``ManifestWriter``), each
/// part deflated on its own by the block engine, so the whole text is never held; and the
/// block engine's ISA-L deflates a many-files manifest several times faster than libzip's
/// zlib at its default level, on the path where nothing else runs. The parts end with a
/// full flush, so together they are one raw deflate stream (as in docs/FORMAT.md §6).
///
/// The STAT answer says the data is deflated and, at the end, gives the CRC-32 and size, so
/// libzip copies the bytes as they are; with a password set on the entry, libzip's own
/// WinZip AES encryption still runs over them (zip_close.c, add_data).
final class ManifestEntrySource: ZipSourceCallbackObject {
    /// Text deflated as one block: large enough to compress well, small enough to hold.
    static let partSize = 1 << 20

    private let produce: () throws -> ManifestWriter
    private let modificationTime: Int64
    /// The writer as made, at the start of the text: each open starts from a copy of it.
    private var made: ManifestWriter?
    private var writer: ManifestWriter?
    private var deflater: BlockDeflater?
    private var text: [UInt8] = []
    private var compressed: [UInt8] = []
    private var compressedCount = 0
    private var position = 0
    private var finished = false
    private var crc: UInt32 = 0
    private var size: Int64 = 0

    init(modificationTime: Int64, produce: @escaping () throws -> ManifestWriter) {
        self.produce = produce
        self.modificationTime = modificationTime
    }

    override func handle(command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        do {
            switch command {
            case ZIP_SOURCE_OPEN:
                try start()
                return 0
            case ZIP_SOURCE_STAT:
                return Self.writeStat(data, length: length) { stat in
                    stat.valid = UInt64(ZIP_STAT_SIZE | ZIP_STAT_COMP_METHOD | ZIP_STAT_MTIME)
                    // Before the data is read the size is not known; libzip rewrites the
                    // local header from the STAT answer after the data.
                    stat.size = UInt64(size)
                    stat.comp_method = UInt16(ZIP_CM_DEFLATE)
                    stat.mtime = time_t(modificationTime)
                    if finished {
                        stat.valid |= UInt64(ZIP_STAT_CRC)
                        stat.crc = crc
                    }
                }
            case ZIP_SOURCE_READ:
                guard let data else { return -1 }
                return Int64(try read(into: data, capacity: Int(length)))
            default:
                zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
                return -1
            }
        } catch {
            return fail(error)
        }
    }

    private func start() throws {
        if made == nil {
            made = try produce()
            deflater = try BlockDeflater(level: 1)
        }
        writer = made
        position = 0
        compressedCount = 0
        finished = false
        crc = 0
        size = 0
    }

    private func read(into destination: UnsafeMutableRawPointer, capacity: Int) throws -> Int {
        while position == compressedCount {
            if finished { return 0 }
            try deflateNextPart()
        }
        let count = min(capacity, compressedCount - position)
        compressed.withUnsafeBytes { destination.copyMemory(from: $0.baseAddress! + position, byteCount: count) }
        position += count
        return count
    }

    private func deflateNextPart() throws {
        guard writer != nil, let deflater else { throw StoreBackupError.archiveWrite(reason: "manifest read before open") }
        _ = writer!.next(into: &text, atLeast: Self.partSize)
        let isLast = writer!.isFinished
        // Room for text that does not compress (stored blocks add a few bytes per 16 KiB).
        let capacity = text.count + text.count / 8 + 1024
        if compressed.count < capacity { compressed = [UInt8](repeating: 0, count: capacity) }
        let count = try text.withUnsafeBytes { input in
            try compressed.withUnsafeMutableBytes { output in
                crc = CRC32.update(crc, input.baseAddress!, count: input.count)
                return try deflater.deflate(
                    input.baseAddress!, count: input.count, into: output.baseAddress!, capacity: output.count,
                    isLast: isLast)
            }
        }
        size += Int64(text.count)
        compressedCount = count
        position = 0
        finished = isLast
    }
}
