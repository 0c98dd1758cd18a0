import Foundation

/// One extracting thread's buffers: `plain` for the bytes of a file (libzip reads into it
/// too), and for ``LocalEntryReader`` the compressed bytes and an ISA-L state, made when it
/// first reads.
final class EntryReadBuffers {
    let capacity: Int
    let plain: UnsafeMutableRawBufferPointer
    private var compressedBytes: UnsafeMutableRawBufferPointer?
    private var inflaterState: BlockInflater?

    /// `capacity` bytes of plain data (the largest file read through them, within the
    /// bounds of ``ParallelUnpacking/readBufferSize(largest:)``).
    init(capacity: Int) {
        self.capacity = capacity
        plain = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit {
        plain.deallocate()
        compressedBytes?.deallocate()
    }

    /// The largest compressed entry read directly into buffers of `capacity`: deflate may
    /// grow incompressible data by 5 bytes per stored block.
    static func compressedCapacity(_ capacity: Int) -> Int { capacity + capacity / 1024 + 1024 }

    var compressed: UnsafeMutableRawBufferPointer {
        if let compressedBytes { return compressedBytes }
        let made = UnsafeMutableRawBufferPointer.allocate(
            byteCount: Self.compressedCapacity(capacity) + 30 + LocalEntryReader.headerSlack, alignment: 16)
        compressedBytes = made
        return made
    }

    var inflater: BlockInflater {
        get throws {
            if let inflaterState { return inflaterState }
            let made = try BlockInflater()
            inflaterState = made
            return made
        }
    }
}
