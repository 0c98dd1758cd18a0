import CSQLite
import CUnpackingFile
import Foundation

/// A database that restore is still writing, front to back, which its `PRAGMA
/// integrity_check` may already read: the check's reads wait until the bytes they need are
/// written (a SQLite VFS, `Sources/CUnpackingFile`).
///
/// The check is single-threaded and the longest step of a restore. Run after the
/// database is unpacked, it adds its whole time to the restore's; run beside the unpacking
/// (the blocks come in order, the check mostly reads forward), it takes the cores the
/// unpacking leaves idle. The writer must end with ``finish()`` or ``fail()``, or the
/// check waits for ever.
final class UnpackingDatabase: @unchecked Sendable {  // the C object locks its own state
    private let file: OpaquePointer

    /// A database of `size` bytes, none written yet.
    init(size: Int64) throws {
        let registered = sb_unpacking_register_vfs()
        guard registered == SQLITE_OK, let file = sb_unpacking_create(size) else {
            throw StoreBackupError.sqlite(path: "", operation: "register the unpacking VFS", message: "result \(registered)")
        }
        self.file = file
    }

    deinit { sb_unpacking_destroy(file) }

    /// What a connection's URI adds to read through this object.
    var uriParameters: String { "vfs=storebackup-unpacking&unpacking=\(sb_unpacking_id(file))" }

    /// Bytes `0..<written` are in the file.
    func advance(to written: Int64) { sb_unpacking_advance(file, written) }

    /// Written in full, mode and time set.
    func finish() { sb_unpacking_finish(file) }

    /// The writer gave up: reads still waiting fail.
    func fail() { sb_unpacking_fail(file) }

    /// Waits for ``finish()`` (true) or ``fail()`` (false).
    func waitUntilDone() -> Bool { sb_unpacking_wait_until_done(file) != 0 }
}
