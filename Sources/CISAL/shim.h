#ifndef STOREBACKUP_CISAL_SHIM_H
#define STOREBACKUP_CISAL_SHIM_H
// Intel ISA-L (libisal): deflate/inflate and CRC-32 several times faster than zlib.
// The helpers below keep ISA-L's large state structs and their bit-field-free but
// macro-sized buffers out of Swift: Swift only sees sizes, pointers and return codes.
#include <stdint.h>
#include <stdlib.h>
#include <isa-l/igzip_lib.h>
#include <isa-l/crc.h>
#include <isa-l/crc64.h>

/// Bytes of the level buffer ISA-L needs for `level` (1-3); 0 for other levels.
static inline uint32_t sb_isal_level_buffer_size(int level) {
    switch (level) {
    case 1: return ISAL_DEF_LVL1_DEFAULT;
    case 2: return ISAL_DEF_LVL2_DEFAULT;
    case 3: return ISAL_DEF_LVL3_DEFAULT;
    default: return 0;
    }
}

static inline struct isal_zstream *sb_isal_deflate_state_new(void) {
    return (struct isal_zstream *)malloc(sizeof(struct isal_zstream));
}

static inline struct inflate_state *sb_isal_inflate_state_new(void) {
    struct inflate_state *state = (struct inflate_state *)malloc(sizeof(struct inflate_state));
    if (state) isal_inflate_init(state);
    return state;
}

/// Deflates one independent block (empty history) as raw deflate. Not last: ends with a
/// full flush (byte-aligned, so blocks concatenate into one stream and each inflates on
/// its own). Last: ends the stream (BFINAL). Returns the compressed size, or -1 when it
/// did not fit in `capacity` or ISA-L failed.
static inline int64_t sb_isal_deflate_block(struct isal_zstream *stream, int level,
                                            uint8_t *level_buffer, uint32_t level_buffer_size,
                                            const uint8_t *input, uint32_t count,
                                            uint8_t *output, uint32_t capacity, int is_last) {
    isal_deflate_stateless_init(stream);
    stream->level = (uint32_t)level;
    stream->level_buf = level_buffer;
    stream->level_buf_size = level_buffer_size;
    stream->flush = is_last ? NO_FLUSH : FULL_FLUSH;
    stream->end_of_stream = is_last ? 1 : 0;
    stream->next_in = (uint8_t *)input;
    stream->avail_in = count;
    stream->next_out = output;
    stream->avail_out = capacity;
    if (isal_deflate_stateless(stream) != COMP_OK || stream->avail_in != 0) return -1;
    return (int64_t)stream->total_out;
}

/// Inflates one block made by the deflater above (raw deflate, no history from earlier
/// blocks). Returns the bytes written to `output`, or -1 on corrupt data, input left
/// over, or more output than `capacity`. `*ended` says whether the block had BFINAL.
static inline int64_t sb_isal_inflate_block(struct inflate_state *state,
                                            const uint8_t *input, uint32_t count,
                                            uint8_t *output, uint32_t capacity, int *ended) {
    isal_inflate_reset(state);
    state->crc_flag = ISAL_DEFLATE;
    state->next_in = (uint8_t *)input;
    state->avail_in = count;
    state->next_out = output;
    state->avail_out = capacity;
    int rc = isal_inflate(state);
    *ended = state->block_state == ISAL_BLOCK_FINISH;
    if (rc != ISAL_DECOMP_OK || state->avail_in != 0) return -1;
    if (state->tmp_out_valid > state->tmp_out_processed) return -1; // output did not fit
    return (int64_t)(capacity - state->avail_out);
}

/// Starts a streaming inflate of raw deflate data (one stream fed in pieces).
static inline void sb_isal_inflate_stream_reset(struct inflate_state *state) {
    isal_inflate_reset(state);
    state->crc_flag = ISAL_DEFLATE;
}

/// Gives the stream its next compressed bytes (the previous ones must be used up).
static inline void sb_isal_inflate_stream_feed(struct inflate_state *state, const uint8_t *input, uint32_t count) {
    state->next_in = (uint8_t *)input;
    state->avail_in = count;
}

/// Compressed bytes fed and not used yet.
static inline uint32_t sb_isal_inflate_stream_pending(const struct inflate_state *state) {
    return state->avail_in;
}

/// Inflates as much as fits in `output`. Returns the bytes written, or -1 on corrupt data.
/// `*ended` says whether the stream ended (BFINAL) and all of it was written out.
static inline int64_t sb_isal_inflate_stream_read(struct inflate_state *state, uint8_t *output, uint32_t capacity,
                                                  int *ended) {
    state->next_out = output;
    state->avail_out = capacity;
    int rc = isal_inflate(state);
    *ended = state->block_state == ISAL_BLOCK_FINISH;
    if (rc < 0) return -1;
    return (int64_t)(capacity - state->avail_out);
}

#endif
