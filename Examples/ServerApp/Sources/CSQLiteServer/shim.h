#ifndef SERVERAPP_CSQLITE_SHIM_H
#define SERVERAPP_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT casts -1 to a function pointer; Swift cannot import that macro.
static inline sqlite3_destructor_type serverapp_sqlite_transient(void) { return SQLITE_TRANSIENT; }

#endif
