/* One term's posting list as the index file stores it (posting blocks, block maxima, positions), for the
 * in-memory builder (builder_write.c) and the merge of runs (build_merge.c), so that both write the same
 * bytes. Sections go to memory, or, given a file, to that file in pieces. Private to index/. */
#ifndef ISN_INDEX_LIST_ENCODER_H
#define ISN_INDEX_LIST_ENCODER_H

#include <stdbool.h>
#include <stdio.h>

#include "index/format.h"
#include "index/section_buf.h"

/* A section being written: its bytes in buf, or, with a file, those not yet written there. */
typedef struct {
    out_buf buf;
    uint64_t flushed; /* bytes already in the file */
    FILE *file;       /* NULL: everything stays in buf */
    int error;        /* errno of the first failed write, else 0 */
} section_out;

static inline uint64_t section_out_len(const section_out *s) { return s->flushed + s->buf.len; }
/* Appends n bytes: 0, or -1 (out of memory, or s->error set by a failed write). */
int section_out_put(section_out *s, const void *p, uint64_t n);
/* With a file: writes buf out once it holds enough. 0, or -1 with s->error. */
int section_out_spill(section_out *s);
/* With a file: writes the rest out and flushes it. 0, or -1 with s->error. */
int section_out_finish(section_out *s);

typedef struct {
    uint32_t num_fields;
    bool with_positions;
    float k1_plus_1;
    const float *norms; /* by doc id */
    uint64_t num_blocks;
    section_out postings, block_meta, pos_blocks, positions;
} list_encoder;

/* Positions while building: (field << ISN_BUILD_POS_BITS | position), in token order. */
#define ISN_BUILD_POS_BITS 28
#define ISN_BUILD_POS_MAX ((1u << ISN_BUILD_POS_BITS) - 1)

/* Encodes a list of n postings given as (doc, tf, start in `positions`) triples in increasing doc order,
 * filling entry (df, cf, max_tf_part, first_block). 0, or -1 out of memory, past 2^32 blocks, or after a
 * failed write (a section's error). */
int list_encoder_add(list_encoder *e, const uint32_t *triples, uint32_t n, const uint32_t *positions,
                     isn_term_entry *entry);

#endif
