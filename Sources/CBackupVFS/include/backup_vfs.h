#ifndef STOREBACKUP_BACKUP_VFS_H
#define STOREBACKUP_BACKUP_VFS_H
#include <stdint.h>

/// A database inside a backup, read through the SQLite VFS "storebackup-backup": every
/// read calls back into Swift, which finds, inflates and checks the block that holds the
/// bytes. Nothing is ever written: writes and truncation return SQLITE_READONLY.
typedef struct sb_backup_file sb_backup_file;

/// Fills `amount` bytes at `offset` into `buffer`; returns SB_BACKUP_READ_OK,
/// SB_BACKUP_READ_SHORT (the file ends first: the rest is zeroed) or SB_BACKUP_READ_FAILED.
enum { SB_BACKUP_READ_OK = 0, SB_BACKUP_READ_SHORT = 1, SB_BACKUP_READ_FAILED = 2 };
typedef int (*sb_backup_read_fn)(void *context, void *buffer, int amount, int64_t offset);

/// A file of `size` bytes whose reads call `read` with `context`; NULL when out of memory.
sb_backup_file *sb_backup_file_create(int64_t size, void *context, sb_backup_read_fn read);
/// Frees it. No connection may still have it open (or attached).
void sb_backup_file_destroy(sb_backup_file *file);
/// The value of the URI parameter "backupdb" that names `file`.
int64_t sb_backup_file_id(const sb_backup_file *file);

/// Registers the VFS "storebackup-backup" (once; later calls return the first result).
/// Open as "file:NAME?vfs=storebackup-backup&immutable=1&backupdb=ID", read-only. A main
/// database opened through it without "backupdb" is an ordinary file of the default VFS
/// (so one URI scheme serves a live database attached beside a backup's).
int sb_backup_register_vfs(void);

#endif
