#include "backup_vfs.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

// Guards against a URI naming anything but a live sb_backup_file.
#define SB_BACKUP_MAGIC 0x7362626b75706462ULL

struct sb_backup_file {
    uint64_t magic;
    int64_t size;
    void *context;
    sb_backup_read_fn read;
};

sb_backup_file *sb_backup_file_create(int64_t size, void *context, sb_backup_read_fn read) {
    sb_backup_file *file = calloc(1, sizeof *file);
    if (file == NULL) return NULL;
    file->magic = SB_BACKUP_MAGIC;
    file->size = size;
    file->context = context;
    file->read = read;
    return file;
}

void sb_backup_file_destroy(sb_backup_file *file) {
    if (file == NULL) return;
    file->magic = 0;
    free(file);
}

int64_t sb_backup_file_id(const sb_backup_file *file) { return (int64_t)(intptr_t)file; }

typedef struct {
    sqlite3_file base;
    sb_backup_file *backup;  // NULL: the default VFS's file in `real`
    sqlite3_file *real;      // in the same allocation
} sb_backup_vfs_file;

static sqlite3_vfs *sb_default_vfs;

// MARK: a backup's database: reads call back, everything else is a no-op or refused.

static int sb_backup_close(sqlite3_file *file) { (void)file; return SQLITE_OK; }

static int sb_backup_read(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
    sb_backup_vfs_file *self = (sb_backup_vfs_file *)file;
    if (offset < 0 || amount < 0) return SQLITE_IOERR_READ;
    switch (self->backup->read(self->backup->context, buffer, amount, offset)) {
    case SB_BACKUP_READ_OK: return SQLITE_OK;
    case SB_BACKUP_READ_SHORT: return SQLITE_IOERR_SHORT_READ;
    default: return SQLITE_IOERR_READ;
    }
}

static int sb_backup_write(sqlite3_file *file, const void *buffer, int amount, sqlite3_int64 offset) {
    (void)file; (void)buffer; (void)amount; (void)offset;
    return SQLITE_READONLY;
}

static int sb_backup_truncate(sqlite3_file *file, sqlite3_int64 size) {
    (void)file; (void)size;
    return SQLITE_READONLY;
}

static int sb_backup_sync(sqlite3_file *file, int flags) { (void)file; (void)flags; return SQLITE_OK; }

static int sb_backup_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    *size = ((sb_backup_vfs_file *)file)->backup->size;
    return SQLITE_OK;
}

// Nothing else can change the file: every lock is granted.
static int sb_backup_lock(sqlite3_file *file, int level) { (void)file; (void)level; return SQLITE_OK; }
static int sb_backup_check_reserved_lock(sqlite3_file *file, int *reserved) { (void)file; *reserved = 0; return SQLITE_OK; }
static int sb_backup_file_control(sqlite3_file *file, int op, void *argument) { (void)file; (void)op; (void)argument; return SQLITE_NOTFOUND; }
static int sb_backup_sector_size(sqlite3_file *file) { (void)file; return 4096; }
static int sb_backup_device_characteristics(sqlite3_file *file) { (void)file; return SQLITE_IOCAP_IMMUTABLE; }

// Version 1: no shared memory and no memory mapping, so every read goes through sb_backup_read.
static const sqlite3_io_methods sb_backup_methods = {
    1, sb_backup_close, sb_backup_read, sb_backup_write, sb_backup_truncate, sb_backup_sync, sb_backup_file_size,
    sb_backup_lock, sb_backup_lock, sb_backup_check_reserved_lock, sb_backup_file_control, sb_backup_sector_size,
    sb_backup_device_characteristics, 0, 0, 0, 0, 0, 0,
};

// MARK: any other file: the default VFS's, every call passed through.

#define SB_REAL(file) (((sb_backup_vfs_file *)(file))->real)
static int sb_pass_close(sqlite3_file *f) { return SB_REAL(f)->pMethods->xClose(SB_REAL(f)); }
static int sb_pass_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { return SB_REAL(f)->pMethods->xRead(SB_REAL(f), b, n, o); }
static int sb_pass_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) { return SB_REAL(f)->pMethods->xWrite(SB_REAL(f), b, n, o); }
static int sb_pass_truncate(sqlite3_file *f, sqlite3_int64 s) { return SB_REAL(f)->pMethods->xTruncate(SB_REAL(f), s); }
static int sb_pass_sync(sqlite3_file *f, int flags) { return SB_REAL(f)->pMethods->xSync(SB_REAL(f), flags); }
static int sb_pass_file_size(sqlite3_file *f, sqlite3_int64 *s) { return SB_REAL(f)->pMethods->xFileSize(SB_REAL(f), s); }
static int sb_pass_lock(sqlite3_file *f, int l) { return SB_REAL(f)->pMethods->xLock(SB_REAL(f), l); }
static int sb_pass_unlock(sqlite3_file *f, int l) { return SB_REAL(f)->pMethods->xUnlock(SB_REAL(f), l); }
static int sb_pass_reserved(sqlite3_file *f, int *r) { return SB_REAL(f)->pMethods->xCheckReservedLock(SB_REAL(f), r); }
static int sb_pass_control(sqlite3_file *f, int op, void *a) { return SB_REAL(f)->pMethods->xFileControl(SB_REAL(f), op, a); }
static int sb_pass_sector(sqlite3_file *f) { return SB_REAL(f)->pMethods->xSectorSize(SB_REAL(f)); }
static int sb_pass_device(sqlite3_file *f) { return SB_REAL(f)->pMethods->xDeviceCharacteristics(SB_REAL(f)); }

// Version 1: a live database attached beside a backup's runs without shared memory (WAL
// databases are read in a mode that needs none: open them with immutable=1 or after a checkpoint).
static const sqlite3_io_methods sb_pass_methods = {
    1, sb_pass_close, sb_pass_read, sb_pass_write, sb_pass_truncate, sb_pass_sync, sb_pass_file_size, sb_pass_lock,
    sb_pass_unlock, sb_pass_reserved, sb_pass_control, sb_pass_sector, sb_pass_device, 0, 0, 0, 0, 0, 0,
};

static int sb_backup_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
    (void)vfs;
    sb_backup_vfs_file *self = (sb_backup_vfs_file *)file;
    self->real = (sqlite3_file *)(self + 1);
    self->backup = NULL;
    file->pMethods = NULL;
    if ((flags & SQLITE_OPEN_MAIN_DB) && name != NULL) {
        sb_backup_file *backup = (sb_backup_file *)(intptr_t)sqlite3_uri_int64(name, "backupdb", 0);
        if (backup != NULL) {
            if (backup->magic != SB_BACKUP_MAGIC || !(flags & SQLITE_OPEN_READONLY)) return SQLITE_CANTOPEN;
            self->backup = backup;
            if (out_flags != NULL) *out_flags = flags;
            file->pMethods = &sb_backup_methods;
            return SQLITE_OK;
        }
    }
    // Anything else (a temporary file for sorting, a database without "backupdb") is an
    // ordinary file of the default VFS.
    int rc = sb_default_vfs->xOpen(sb_default_vfs, name, self->real, flags, out_flags);
    if (rc != SQLITE_OK) return rc;
    file->pMethods = &sb_pass_methods;
    return SQLITE_OK;
}

static sqlite3_vfs sb_backup_vfs;
static int sb_register_result = SQLITE_ERROR;
static pthread_once_t sb_register_once = PTHREAD_ONCE_INIT;

static void sb_register(void) {
    sb_default_vfs = sqlite3_vfs_find(NULL);
    if (sb_default_vfs == NULL) return;
    // Everything but opening is the default VFS's (access, deletion, time, randomness, ...).
    sb_backup_vfs = *sb_default_vfs;
    sb_backup_vfs.iVersion = sb_default_vfs->iVersion < 3 ? sb_default_vfs->iVersion : 3;
    sb_backup_vfs.szOsFile = (int)sizeof(sb_backup_vfs_file) + sb_default_vfs->szOsFile;
    sb_backup_vfs.zName = "storebackup-backup";
    sb_backup_vfs.pNext = NULL;
    sb_backup_vfs.xOpen = sb_backup_open;
    sb_register_result = sqlite3_vfs_register(&sb_backup_vfs, 0);
}

int sb_backup_register_vfs(void) {
    pthread_once(&sb_register_once, sb_register);
    return sb_register_result;
}
