#include "unpacking_file.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

// Guards against a URI naming anything but a live sb_unpacking.
#define SB_UNPACKING_MAGIC 0x73627570636b6731ULL

struct sb_unpacking {
    uint64_t magic;
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    int64_t final_size;
    int64_t written;
    int finished;
    int failed;
};

sb_unpacking *sb_unpacking_create(int64_t final_size) {
    sb_unpacking *file = calloc(1, sizeof *file);
    if (file == NULL) return NULL;
    file->magic = SB_UNPACKING_MAGIC;
    file->final_size = final_size;
    pthread_mutex_init(&file->mutex, NULL);
    pthread_cond_init(&file->changed, NULL);
    return file;
}

void sb_unpacking_destroy(sb_unpacking *file) {
    if (file == NULL) return;
    file->magic = 0;
    pthread_cond_destroy(&file->changed);
    pthread_mutex_destroy(&file->mutex);
    free(file);
}

static void sb_unpacking_update(sb_unpacking *file, int64_t written, int finished, int failed) {
    pthread_mutex_lock(&file->mutex);
    if (written > file->written) file->written = written;
    if (finished) { file->finished = 1; file->written = file->final_size; }
    if (failed) file->failed = 1;
    pthread_cond_broadcast(&file->changed);
    pthread_mutex_unlock(&file->mutex);
}

void sb_unpacking_advance(sb_unpacking *file, int64_t written) { sb_unpacking_update(file, written, 0, 0); }
void sb_unpacking_finish(sb_unpacking *file) { sb_unpacking_update(file, 0, 1, 0); }
void sb_unpacking_fail(sb_unpacking *file) { sb_unpacking_update(file, 0, 0, 1); }

int sb_unpacking_wait_until_done(sb_unpacking *file) {
    pthread_mutex_lock(&file->mutex);
    while (!file->finished && !file->failed) pthread_cond_wait(&file->changed, &file->mutex);
    int finished = file->finished && !file->failed;
    pthread_mutex_unlock(&file->mutex);
    return finished;
}

/// Waits until bytes [0, end) are written; 0 when the writer failed first.
static int sb_unpacking_wait_for(sb_unpacking *file, int64_t end) {
    pthread_mutex_lock(&file->mutex);
    if (end > file->final_size) end = file->final_size;
    while (file->written < end && !file->failed) pthread_cond_wait(&file->changed, &file->mutex);
    int available = file->written >= end;
    pthread_mutex_unlock(&file->mutex);
    return available;
}

int64_t sb_unpacking_id(const sb_unpacking *file) { return (int64_t)(intptr_t)file; }

// MARK: the VFS: the default VFS's files, with reads that wait and the final size known.

typedef struct {
    sqlite3_file base;
    sb_unpacking *unpacking;   // NULL: a plain file, every call passed through
    sqlite3_file *real;        // the default VFS's file, in the same allocation
} sb_unpacking_vfs_file;

static sqlite3_vfs *sb_default_vfs;

static int sb_close(sqlite3_file *file) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xClose(self->real);
}

static int sb_read(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    if (self->unpacking != NULL && !sb_unpacking_wait_for(self->unpacking, offset + amount)) return SQLITE_IOERR_READ;
    return self->real->pMethods->xRead(self->real, buffer, amount, offset);
}

static int sb_write(sqlite3_file *file, const void *buffer, int amount, sqlite3_int64 offset) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    if (self->unpacking != NULL) return SQLITE_READONLY;
    return self->real->pMethods->xWrite(self->real, buffer, amount, offset);
}

static int sb_truncate(sqlite3_file *file, sqlite3_int64 size) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    if (self->unpacking != NULL) return SQLITE_READONLY;
    return self->real->pMethods->xTruncate(self->real, size);
}

static int sb_sync(sqlite3_file *file, int flags) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xSync(self->real, flags);
}

static int sb_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    // The size the file will have: SQLite sizes the database from it before reading it all.
    if (self->unpacking != NULL) { *size = self->unpacking->final_size; return SQLITE_OK; }
    return self->real->pMethods->xFileSize(self->real, size);
}

static int sb_lock(sqlite3_file *file, int level) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xLock(self->real, level);
}

static int sb_unlock(sqlite3_file *file, int level) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xUnlock(self->real, level);
}

static int sb_check_reserved_lock(sqlite3_file *file, int *reserved) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xCheckReservedLock(self->real, reserved);
}

static int sb_file_control(sqlite3_file *file, int op, void *argument) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xFileControl(self->real, op, argument);
}

static int sb_sector_size(sqlite3_file *file) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xSectorSize(self->real);
}

static int sb_device_characteristics(sqlite3_file *file) {
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    return self->real->pMethods->xDeviceCharacteristics(self->real);
}

// Version 1: no shared memory and no memory mapping, so every read goes through sb_read.
static const sqlite3_io_methods sb_unpacking_methods = {
    1, sb_close, sb_read, sb_write, sb_truncate, sb_sync, sb_file_size, sb_lock, sb_unlock,
    sb_check_reserved_lock, sb_file_control, sb_sector_size, sb_device_characteristics,
    0, 0, 0, 0, 0, 0,
};

static int sb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
    (void)vfs;
    sb_unpacking_vfs_file *self = (sb_unpacking_vfs_file *)file;
    self->real = (sqlite3_file *)(self + 1);
    self->unpacking = NULL;
    file->pMethods = NULL;
    if ((flags & SQLITE_OPEN_MAIN_DB) && name != NULL) {
        sb_unpacking *unpacking = (sb_unpacking *)(intptr_t)sqlite3_uri_int64(name, "unpacking", 0);
        if (unpacking != NULL) {
            if (unpacking->magic != SB_UNPACKING_MAGIC || !(flags & SQLITE_OPEN_READONLY)) return SQLITE_CANTOPEN;
            self->unpacking = unpacking;
        }
    }
    int rc = sb_default_vfs->xOpen(sb_default_vfs, name, self->real, flags, out_flags);
    if (rc != SQLITE_OK) return rc;
    file->pMethods = &sb_unpacking_methods;
    return SQLITE_OK;
}

static sqlite3_vfs sb_unpacking_vfs;
static int sb_register_result = SQLITE_ERROR;
static pthread_once_t sb_register_once = PTHREAD_ONCE_INIT;

static void sb_register(void) {
    sb_default_vfs = sqlite3_vfs_find(NULL);
    if (sb_default_vfs == NULL) return;
    // Everything but opening is the default VFS's (deletion, time, randomness, ...).
    sb_unpacking_vfs = *sb_default_vfs;
    sb_unpacking_vfs.iVersion = sb_default_vfs->iVersion < 3 ? sb_default_vfs->iVersion : 3;
    sb_unpacking_vfs.szOsFile = (int)sizeof(sb_unpacking_vfs_file) + sb_default_vfs->szOsFile;
    sb_unpacking_vfs.zName = "storebackup-unpacking";
    sb_unpacking_vfs.pNext = NULL;
    sb_unpacking_vfs.xOpen = sb_open;
    sb_register_result = sqlite3_vfs_register(&sb_unpacking_vfs, 0);
}

int sb_unpacking_register_vfs(void) {
    pthread_once(&sb_register_once, sb_register);
    return sb_register_result;
}
