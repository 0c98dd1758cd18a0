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

#endif
