#ifndef STOREBACKUP_CSQLITE_SHIM_H
#define STOREBACKUP_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type sb_sqlite_transient(void) { return SQLITE_TRANSIENT; }

/// The database's own file handle, so a snapshot can read the main file through
/// SQLite's VFS instead of opening a second descriptor. A second descriptor would be
/// dangerous: closing it drops every POSIX lock this process holds on the file,
/// including the ones SQLite's connections rely on.
static inline sqlite3_file *sb_sqlite_main_file(sqlite3 *db) {
    sqlite3_file *file = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK) return 0;
    if (file == 0 || file->pMethods == 0) return 0;
    return file;
}

/// Reads `amount` bytes at `offset` from a file handle returned by sb_sqlite_main_file.
static inline int sb_sqlite_file_read(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
    return file->pMethods->xRead(file, buffer, amount, offset);
}

/// Reads `amount` bytes at `offset` of the file at `path` through the default VFS, opened
/// as a read-only main database file but without a connection (a connection costs about
/// four times as much, which adds up over thousands of blobs). Like a connection, the VFS
/// keeps the descriptor open while this process holds locks on the file, so reading does
/// not drop them. A short read fills the rest with zeros. Returns an SQLite result code.
/// With `second` not null, also reads `secondAmount` bytes at `secondOffset` through the same
/// open file and stores that read's result code in `*secondResult` (create's scan reads a
/// file's header and its compressibility sample with one open).
static inline int sb_sqlite_vfs_read_two(
    const char *path, void *buffer, int amount, sqlite3_int64 offset,
    void *second, int secondAmount, sqlite3_int64 secondOffset, int *secondResult) {
    sqlite3_vfs *vfs = sqlite3_vfs_find(0);
    if (vfs == 0) return SQLITE_ERROR;
    // A name laid out as SQLite passes it to xOpen (followed by its parameter list).
    sqlite3_filename name = sqlite3_create_filename(path, "", "", 0, 0);
    sqlite3_file *file = (sqlite3_file *)sqlite3_malloc(vfs->szOsFile);
    if (name == 0 || file == 0) { sqlite3_free(file); sqlite3_free_filename(name); return SQLITE_NOMEM; }
    file->pMethods = 0;
    int flags = 0;
    int rc = vfs->xOpen(vfs, name, file, SQLITE_OPEN_READONLY | SQLITE_OPEN_MAIN_DB, &flags);
    if (rc == SQLITE_OK) rc = file->pMethods->xRead(file, buffer, amount, offset);
    if (second != 0 && secondResult != 0) {
        *secondResult = file->pMethods != 0 ? file->pMethods->xRead(file, second, secondAmount, secondOffset) : rc;
    }
    if (file->pMethods != 0) file->pMethods->xClose(file);
    sqlite3_free(file);
    sqlite3_free_filename(name);
    return rc;
}

/// One range of sb_sqlite_vfs_read_two.
static inline int sb_sqlite_vfs_read(const char *path, void *buffer, int amount, sqlite3_int64 offset) {
    return sb_sqlite_vfs_read_two(path, buffer, amount, offset, 0, 0, 0, 0);
}

#endif
