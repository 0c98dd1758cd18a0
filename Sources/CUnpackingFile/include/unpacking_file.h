#ifndef STOREBACKUP_UNPACKING_FILE_H
#define STOREBACKUP_UNPACKING_FILE_H
#include <stdint.h>

/// A database file that restore is still writing, front to back, and that
/// `PRAGMA integrity_check` may already read: reads through the SQLite VFS
/// "storebackup-unpacking" wait until the bytes they ask for are written.
///
/// This lets the check (single-threaded, the longest step of a restore) run beside the
/// unpacking of the same database instead of after it. The check reads the file only
/// through this VFS; the writer reports progress with sb_unpacking_advance and ends with
/// sb_unpacking_finish (file complete) or sb_unpacking_fail (readers get an I/O error).
typedef struct sb_unpacking sb_unpacking;

/// A file of `final_size` bytes of which none is written yet; NULL when out of memory.
sb_unpacking *sb_unpacking_create(int64_t final_size);
/// Frees it. No connection opened on it may still be open.
void sb_unpacking_destroy(sb_unpacking *file);
/// Bytes [0, written) are in the file (through write or pwrite; readers see them).
void sb_unpacking_advance(sb_unpacking *file, int64_t written);
/// The whole file is written and its attributes set: readers need not wait any more.
void sb_unpacking_finish(sb_unpacking *file);
/// The writer gave up: a read that would wait fails with SQLITE_IOERR_READ instead.
void sb_unpacking_fail(sb_unpacking *file);
/// Waits until the file is finished (returns 1) or failed (returns 0).
int sb_unpacking_wait_until_done(sb_unpacking *file);

/// Registers the VFS "storebackup-unpacking" (once; later calls return the first result).
/// Open the database as "file:PATH?immutable=1&vfs=storebackup-unpacking&unpacking=ID"
/// where ID is sb_unpacking_id(file). Returns an SQLite result code.
int sb_unpacking_register_vfs(void);
/// The value of the URI parameter "unpacking" that names `file`.
int64_t sb_unpacking_id(const sb_unpacking *file);

#endif
