import CBackupVFS
import CSQLite
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The newer of two databases a diff copies (``ScratchCopies``), kept as the pages in which
/// it differs from the older one's copy: SQLite reads it through the VFS
/// "storebackup-backup" (`Sources/CBackupVFS`), each page from this overlay when it differs,
/// else from the older copy. Only the pages that differ are written, not the whole
/// database a second time. The overlay file is unlinked at once: nothing is left behind,
/// whatever ends the process.
// Unchecked: the C object is made in init and freed in deinit; the slots are locked; pread
// and pwrite on the descriptors are safe from several threads.
final class ScratchOverlayCopy: ComparedDatabase, @unchecked Sendable {
    let size: Int64
    /// The overlay's unit: the page size, or a copied chunk when the two page sizes differ.
    let unit: Int
    private let base: ScratchDatabaseCopy
    private let descriptor: Int32
    /// Unit number (from 0) → where its bytes are in the overlay file.
    private let slots = Locked<(slots: [Int: Int64], end: Int64)>(([:], 0))
    private var file: OpaquePointer?

    init(size: Int64, unit: Int, base: ScratchDatabaseCopy) throws {
        self.size = size
        self.unit = unit
        self.base = base
        let path = ScratchFiles.path(in: ScratchFiles.temporaryDirectory, purpose: "diff-pages")
        descriptor = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "create", errno: errno) }
        unlink(path)
        let registered = sb_backup_register_vfs()
        guard registered == SQLITE_OK else {
            close(descriptor)
            throw StoreBackupError.sqlite(path: path, operation: "register the backup VFS", message: "result \(registered)")
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        file = sb_backup_file_create(size, context) { context, buffer, amount, offset in
            guard let context, let buffer else { return Int32(SB_BACKUP_READ_FAILED) }
            let copy = Unmanaged<ScratchOverlayCopy>.fromOpaque(context).takeUnretainedValue()
            return copy.serve(UnsafeMutableRawBufferPointer(start: buffer, count: Int(amount)), at: offset)
        }
        guard file != nil else {
            close(descriptor)
            throw StoreBackupError.sqlite(path: path, operation: "open", message: "out of memory")
        }
    }

    deinit {
        sb_backup_file_destroy(file)
        close(descriptor)
    }

    /// A URI that opens the database read-only through the backup VFS; valid while this
    /// object lives.
    var uri: String {
        let identifier = sb_backup_file_id(file)
        return "file:/storebackup-diff/\(identifier).sqlite?vfs=storebackup-backup&immutable=1&backupdb=\(identifier)&mode=ro"
    }

    /// Units laid over the base, in order.
    var overlaidUnits: [Int] { slots.withLock { $0.slots.keys.sorted() } }

    /// Lays `bytes` (the whole unit, or its end in the database) over unit `number`.
    func overlay(unit number: Int, _ bytes: UnsafeRawBufferPointer) throws {
        let slot = slots.withLock { state in
            defer { state.end += Int64(unit) }
            state.slots[number] = state.end
            return state.end
        }
        try FileSystem.write(descriptor, bytes, at: slot, path: "(scratch pages)")
    }

    func bytes(at offset: Int64, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        try bytes.withUnsafeMutableBytes { try read(into: $0, at: offset) }
        return bytes
    }

    func schemaRows(_ sql: String) throws -> [[SQLValue]] {
        try ScratchDatabaseCopy.rows(sql, uri: uri, path: "(scratch pages)")
    }

    /// One xRead: the bytes at `offset`, zeros and a short read past the end.
    private func serve(_ buffer: UnsafeMutableRawBufferPointer, at offset: Int64) -> Int32 {
        let available = Int(max(0, min(Int64(buffer.count), size - offset)))
        if available < buffer.count {
            (buffer.baseAddress! + available).initializeMemory(as: UInt8.self, repeating: 0, count: buffer.count - available)
        }
        do {
            try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<available]), at: offset)
        } catch {
            return Int32(SB_BACKUP_READ_FAILED)
        }
        return Int32(available < buffer.count ? SB_BACKUP_READ_SHORT : SB_BACKUP_READ_OK)
    }

    /// The database's bytes at `offset` (within its size): each unit from the overlay when
    /// it differs, else from the base copy.
    private func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        var done = 0
        while done < buffer.count {
            let position = offset + Int64(done)
            let number = Int(position / Int64(unit))
            let start = Int(position % Int64(unit))
            let count = min(buffer.count - done, unit - start)
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[done..<done + count])
            let slot = slots.withLock { $0.slots[number] }
            let source = slot.map { ($0 + Int64(start), descriptor) } ?? (position, base.descriptorForReading)
            let got = try PositionedRead.fill(source.1, into: piece, at: source.0, path: "(scratch pages)")
            guard got == count else { throw StoreBackupError.io(path: "(scratch pages)", operation: "read", errno: EIO) }
            done += count
        }
    }
}
