import CBackupVFS
import CSQLite
import Foundation

/// The file SQLite reads through the VFS "storebackup-backup" (`Sources/CBackupVFS`): a
/// database as one backup holds it, its pages served from the entry's blocks
/// (``EntryBlockReader``) or, for a point of a chain, from the newest page delta that writes
/// them (``ChainPages``). A read that fails returns an I/O error to SQLite and keeps the
/// reason, which ``BackupDatabase`` throws instead of SQLite's "disk I/O error".
// Unchecked: the C object is made in init and freed in deinit; `failure` is locked.
final class BackupPageFile: @unchecked Sendable {
    /// The database's size in the backup (the newest manifest's).
    let size: Int64
    let base: EntryBlockReader
    let chain: ChainPages?
    /// The backups its pages come from, for telling which pages two points share.
    let lineage: PageLineage
    /// Where every archive of its chain is read (for the bytes fetched from remote ones).
    let spans: [ArchiveSpanReader]
    private let failure = Locked<StoreBackupError?>(nil)
    private var file: OpaquePointer?

    init(size: Int64, base: EntryBlockReader, chain: ChainPages?, lineage: PageLineage, spans: [ArchiveSpanReader]) throws {
        self.size = size
        self.base = base
        self.chain = chain
        self.lineage = lineage
        self.spans = spans
        let registered = sb_backup_register_vfs()
        guard registered == SQLITE_OK else {
            throw StoreBackupError.sqlite(path: base.databasePath, operation: "register the backup VFS", message: "result \(registered)")
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        file = sb_backup_file_create(size, context) { context, buffer, amount, offset in
            guard let context, let buffer else { return Int32(SB_BACKUP_READ_FAILED) }
            let file = Unmanaged<BackupPageFile>.fromOpaque(context).takeUnretainedValue()
            return file.serve(UnsafeMutableRawBufferPointer(start: buffer, count: Int(amount)), at: offset)
        }
        guard file != nil else { throw StoreBackupError.sqlite(path: base.databasePath, operation: "open", message: "out of memory") }
    }

    deinit { sb_backup_file_destroy(file) }

    /// What a URI adds to open this file (with `vfs=storebackup-backup`).
    var identifier: Int64 { sb_backup_file_id(file) }

    /// The failure behind the last read that failed, taken (cleared) by the caller.
    func takeFailure() -> StoreBackupError? {
        failure.withLock { value in
            defer { value = nil }; return value
        }
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
            failure.withLock { $0 = StoreBackupError.wrapping(error) }
            return Int32(SB_BACKUP_READ_FAILED)
        }
        return Int32(available < buffer.count ? SB_BACKUP_READ_SHORT : SB_BACKUP_READ_OK)
    }

    /// The database's bytes at `offset` (within its size): each page from the newest delta
    /// that holds it, else from the base entry, else zeros (beyond the base's end).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        try read(into: buffer, at: offset, base: base, chain: chain)
    }

    /// ``read(into:at:)`` taking the base entry's blocks through `base` and the deltas'
    /// through `chain` (siblings of ``base`` and ``chain``, for another thread).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, base: EntryBlockReader, chain: ChainPages?) throws {
        guard let chain else { return try readBase(into: buffer, at: offset, base: base) }
        var done = 0
        while done < buffer.count {
            let position = offset + Int64(done)
            let page = Int(position / Int64(chain.pageSize)) + 1
            let start = Int(position % Int64(chain.pageSize))
            let count = min(buffer.count - done, chain.pageSize - start)
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[done..<done + count])
            if try !chain.copy(page: page, from: start, into: piece) { try readBase(into: piece, at: position, base: base) }
            done += count
        }
    }

    private func readBase(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, base: EntryBlockReader) throws {
        let inBase = Int(max(0, min(Int64(buffer.count), base.index.size - offset)))
        if inBase > 0 { try base.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<inBase]), at: offset) }
        if inBase < buffer.count {
            (buffer.baseAddress! + inBase).initializeMemory(as: UInt8.self, repeating: 0, count: buffer.count - inBase)
        }
    }
}
