import CISAL
import CZip

#if canImport(Glibc)
import Glibc
#endif

/// Which deflate implementation serves a compression level.
///
/// ISA-L (Intel's igzip) deflates several times faster than zlib per core at the levels it
/// has (1-3), and its level 2 is as fast as its level 1 but smaller, and smaller than
/// zlib's level 1 (docs/dev/performance.md). So levels 1-2 use ISA-L level 2, level 3 uses
/// ISA-L level 3, and levels 4-9 stay with zlib, whose sizes ISA-L cannot match.
/// Level 0 (stored deflate blocks, for encrypted incompressible files) stays with zlib.
enum DeflateEngine: Equatable {
    case isal(level: Int32)
    case zlib(level: Int32)

    init(level: Int) {
        switch level {
        case 1, 2: self = .isal(level: 2)
        case 3: self = .isal(level: 3)
        default: self = .zlib(level: Int32(max(0, min(9, level))))
        }
    }
}

/// Deflates independent blocks (no history shared between blocks), one instance per
/// worker thread: the ISA-L state and level buffer (about 400 KiB) are allocated once.
///
/// A block that is not the last ends with a full flush, byte-aligned, so the blocks
/// concatenate into one valid raw deflate stream (what the ZIP entry holds) and each one
/// can also be inflated on its own (what restore does in parallel).
final class BlockDeflater {
    let engine: DeflateEngine
    private var isalState: UnsafeMutablePointer<isal_zstream>?
    private var levelBuffer: UnsafeMutableRawPointer?
    private var levelBufferSize: UInt32 = 0
    /// zlib, for its levels, and for the rare ISA-L block that does not fit the output buffer.
    private var zlibStream: UnsafeMutablePointer<z_stream>?
    private let zlibLevel: Int32

    init(level: Int) throws {
        engine = DeflateEngine(level: level)
        switch engine {
        case .isal(let isalLevel):
            zlibLevel = Int32(level)
            levelBufferSize = sb_isal_level_buffer_size(isalLevel)
            guard let state = sb_isal_deflate_state_new() else {
                throw StoreBackupError.archiveWrite(reason: "out of memory for the ISA-L deflate state")
            }
            isalState = state
            levelBuffer = UnsafeMutableRawPointer.allocate(byteCount: Int(levelBufferSize), alignment: 64)
        case .zlib(let zlibLevel):
            self.zlibLevel = zlibLevel
            try makeZlibStream()
        }
    }

    deinit {
        free(isalState)
        levelBuffer?.deallocate()
        if let zlibStream {
            deflateEnd(zlibStream)
            zlibStream.deallocate()
        }
    }

    private func makeZlibStream() throws {
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard sb_deflate_init_raw(stream, zlibLevel) == Z_OK else {
            stream.deallocate()
            throw StoreBackupError.archiveWrite(reason: "zlib deflateInit failed")
        }
        zlibStream = stream
    }

    /// Deflates `count` bytes into `output`; returns the compressed size.
    func deflate(
        _ input: UnsafeRawPointer, count: Int, into output: UnsafeMutableRawPointer, capacity: Int,
        isLast: Bool
    ) throws -> Int {
        if case .isal(let level) = engine, let isalState {
            let written = sb_isal_deflate_block(
                isalState, level, levelBuffer?.assumingMemoryBound(to: UInt8.self), levelBufferSize,
                input.assumingMemoryBound(to: UInt8.self), UInt32(count),
                output.assumingMemoryBound(to: UInt8.self), UInt32(capacity), isLast ? 1 : 0)
            if written >= 0 { return Int(written) }
            // Did not fit (data that does not compress): zlib falls back to stored blocks.
            if zlibStream == nil { try makeZlibStream() }
        }
        guard let stream = zlibStream else { throw StoreBackupError.archiveWrite(reason: "no deflate stream") }
        guard deflateReset(stream) == Z_OK else { throw StoreBackupError.archiveWrite(reason: "zlib deflateReset failed") }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(count)
        stream.pointee.next_out = output.assumingMemoryBound(to: Bytef.self)
        stream.pointee.avail_out = uInt(capacity)
        let rc = CZip.deflate(stream, isLast ? Z_FINISH : Z_SYNC_FLUSH)
        let finished =
            isLast
            ? rc == Z_STREAM_END
            : (rc == Z_OK && stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0)
        guard finished else { throw StoreBackupError.archiveWrite(reason: "zlib deflate failed (\(rc))") }
        return capacity - Int(stream.pointee.avail_out)
    }
}

/// Inflates one independent block with ISA-L (any raw deflate data, whichever library
/// made it), one instance per worker thread.
final class BlockInflater {
    private let state: UnsafeMutablePointer<inflate_state>

    init() throws {
        guard let state = sb_isal_inflate_state_new() else {
            throw StoreBackupError.archiveWrite(reason: "out of memory for the ISA-L inflate state")
        }
        self.state = state
    }

    deinit { free(state) }

    /// The inflated size, or nil when the data is corrupt, leaves input unused, does not fit
    /// `capacity`, or ends the stream (BFINAL) where it should not, or not where it should.
    func inflate(
        _ input: UnsafeRawPointer, count: Int, into output: UnsafeMutableRawPointer, capacity: Int,
        isLast: Bool
    ) -> Int? {
        var ended: Int32 = 0
        let written = sb_isal_inflate_block(
            state, input.assumingMemoryBound(to: UInt8.self), UInt32(count),
            output.assumingMemoryBound(to: UInt8.self), UInt32(capacity), &ended)
        guard written >= 0, (ended != 0) == isLast else { return nil }
        return Int(written)
    }
}
