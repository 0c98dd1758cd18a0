#ifndef STOREBACKUP_CZIP_SHIM_H
#define STOREBACKUP_CZIP_SHIM_H
#include <zip.h>
#include <zlib.h>

/// deflateInit2 is a macro over deflateInit2_ (it passes the zlib version and struct size).
static inline int sb_deflate_init_raw(z_stream *stream, int level) {
    return deflateInit2(stream, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
}

static inline int sb_inflate_init_raw(z_stream *stream) {
    return inflateInit2(stream, -15);
}

#endif
