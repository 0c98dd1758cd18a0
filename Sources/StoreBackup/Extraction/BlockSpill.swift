import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where an ``InflatedBlockCache`` puts the blocks it drops, so that a block read again is
/// read back instead of inflated and hashed again: an unlinked scratch file in `TMPDIR`,
/// made at the first block (nothing is left behind, whatever ends the process). A scan that
/// jumps between many entries' blocks (a diff between points of a chain, whose pages come
/// from several page deltas) so inflates each block once. Best effort: a block that cannot
/// be written (no room) is only not kept, and one that cannot be read back is inflated.
// Unchecked: every mutable property is used with `lock` held; reads are pread.
final class BlockSpill: @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32 = -1
    private var end: Int64 = 0
    /// Block (entry, number) → where its bytes are, and how many.
    private var places: [BlockKey: (offset: Int64, count: Int)] = [:]
    private var failed = false

    deinit { if descriptor >= 0 { close(descriptor) } }

    func holds(_ key: BlockKey) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return places[key] != nil
    }

    /// Keeps `bytes` as block `key` (already kept: nothing to do).
    func store(_ bytes: [UInt8], as key: BlockKey) {
        lock.lock()
        defer { lock.unlock() }
        guard places[key] == nil, !failed else { return }
        if descriptor < 0 {
            let path = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "blocks")
            descriptor = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else {
                failed = true
                return
            }
            unlink(path)
        }
        do {
            try bytes.withUnsafeBytes { try FileSystem.write(descriptor, $0, at: end, path: "(scratch blocks)") }
        } catch {
            failed = true
            return
        }
        places[key] = (end, bytes.count)
        end += Int64(bytes.count)
    }

    /// Block `key`'s bytes, if kept and read back whole.
    func load(_ key: BlockKey) -> [UInt8]? {
        lock.lock()
        let place = places[key]
        let descriptor = descriptor
        lock.unlock()
        guard let place else { return nil }
        var bytes = [UInt8](repeating: 0, count: place.count)
        let got = bytes.withUnsafeMutableBytes {
            try? PositionedRead.fill(descriptor, into: $0, at: place.offset, path: "(scratch blocks)")
        }
        return got == place.count ? bytes : nil
    }
}

/// A block of one entry: ``EntryBlockReader``s take a number each, which their siblings (the
/// same entry, read on other threads) share.
struct BlockKey: Hashable, Sendable {
    let entry: Int
    let number: Int

    private static let entries = Locked(0)

    /// A number no other entry reader of this process has.
    static func newEntry() -> Int {
        entries.withLock {
            $0 += 1
            return $0
        }
    }
}
