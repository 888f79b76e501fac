/* The device's posting layout (device.h, "Device layout"), written from the index's blocks at upload.
 * The index's blocks are bit-packed gaps with exceptions and a 1- or 3-byte header, so on the device every
 * packed word load was unaligned (two loads and a funnel shift), every exception cost the whole warp a
 * round of shuffles, and a posting's doc needed the sum of the gaps before it. Here a block's field width
 * lives in its metadata, each field is the posting's offset from the block's base (a lane decodes its
 * postings on its own), fields and tf parts start on 16-byte boundaries, and there are no exceptions;
 * holding the tf part instead of the tf spares the device each posting's norm load and a division. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/posting_decode.h"

/* Blocks [first, first + count) of one term, decoded one at a time. */
typedef struct {
    const isn_index *ix;
    const uint8_t *payload;
    const isn_block_meta *blocks;
    const float *norms;
    float k1_plus_1;
    uint32_t df, num_blocks;
    uint32_t docs[ISN_BLOCK_SIZE], freqs[ISN_BLOCK_SIZE];
} term_reader;

/* Bits of the block's largest field: its last posting's offset (device.h), from the codec's gaps (doc minus
 * the previous doc minus one). Offsets rise, so the last is the largest. */
static uint32_t offset_width(const uint32_t *gaps, uint32_t n) {
    uint32_t offset = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) offset += gaps[i] + 1u;
    return offset ? 32u - (uint32_t)__builtin_clz(offset) : 0u;
}

/* Block b's doc gaps, and with `freqs` its tf - 1, into the reader (sizing the layout needs only the gaps);
 * its count, or 0 with err for a malformed block. */
static uint32_t read_block(term_reader *r, uint32_t term, uint32_t b, bool freqs, char *err, size_t err_len) {
    const uint32_t n = gpu_block_count(r->df, r->num_blocks, b);
    const uint8_t *in = r->payload + r->blocks[b].offset;
    const size_t doc_bytes = isn_codec_decode(in, n, r->docs);
    if (doc_bytes == 0 || (freqs && isn_codec_decode(in + doc_bytes, n, r->freqs) == 0)) {
        snprintf(err, err_len, "GPU backend: posting block %u of term %u does not decode; the index is damaged", b,
                 term);
        return 0;
    }
    return n;
}

static void open_reader(term_reader *r, const isn_index *ix, uint32_t term) {
    uint64_t payload_bytes, num_blocks;
    isn_term_stats st;
    isn_index_term_stats(ix, term, &st);
    r->ix = ix;
    r->payload = isn_index_postings_payload(ix, &payload_bytes);
    r->blocks = isn_index_block_metas(ix, &num_blocks) + st.first_block;
    r->norms = isn_index_doc_norms(ix);
    r->k1_plus_1 = isn_index_get_info(ix)->bm25.k1 + 1.0f;
    r->df = st.df;
    r->num_blocks = st.num_blocks;
}

uint64_t gpu_layout_list_bytes(const isn_index *ix, const uint8_t *widths, uint32_t term, uint32_t upto) {
    isn_term_stats st;
    isn_index_term_stats(ix, term, &st);
    uint64_t bytes = 0;
    for (uint32_t b = 0; b < upto; b++)
        bytes += gpu_layout_block_bytes(gpu_block_count(st.df, st.num_blocks, b), widths[(uint64_t)st.first_block + b]);
    return bytes;
}

#define GPU_LAYOUT_MAX_THREADS 64

/* Value i of n into a stream of `bits`-bit fields in four interleaved 32-bit lanes (zeroed before). */
static void pack_value(uint8_t *stream, uint32_t bits, uint32_t i, uint32_t value) {
    const uint32_t bit = (i >> 2) * bits, word = bit >> 5, shift = bit & 31u;
    uint32_t *low = (uint32_t *)(void *)(stream + 16u * word + 4u * (i & 3u));
    *low |= value << shift;
    if (shift + bits > 32u) low[4] |= value >> (32u - shift);
}

/* One thread's share of the terms, [from, to), for measuring (payload NULL) or writing. */
typedef struct {
    const isn_index *ix;
    uint8_t *widths;
    const uint32_t *term_blocks;
    const uint64_t *term_offset;
    uint8_t *payload;
    isn_block_meta *metas;
    uint32_t from, to;
    int rc;
    char err[256];
} layout_part;

static void measure_terms(layout_part *p) {
    term_reader r;
    for (uint32_t t = p->from; t < p->to; t++) {
        open_reader(&r, p->ix, t);
        isn_term_stats st;
        isn_index_term_stats(p->ix, t, &st);
        for (uint32_t b = 0; b < r.num_blocks; b++) {
            const uint32_t n = read_block(&r, t, b, false, p->err, sizeof p->err);
            if (n == 0) {
                p->rc = -1;
                return;
            }
            p->widths[(uint64_t)st.first_block + b] = (uint8_t)offset_width(r.docs, n);
        }
    }
}

static void write_terms(layout_part *p) {
    term_reader r;
    for (uint32_t t = p->from; t < p->to; t++) {
        if (p->term_blocks[t] == 0) continue;
        open_reader(&r, p->ix, t);
        isn_term_stats st;
        isn_index_term_stats(p->ix, t, &st);
        uint64_t at = p->term_offset[t];
        for (uint32_t b = 0; b < p->term_blocks[t]; b++) {
            const uint32_t n = read_block(&r, t, b, true, p->err, sizeof p->err);
            if (n == 0) {
                p->rc = -1;
                return;
            }
            const uint64_t k = (uint64_t)st.first_block + b;
            const uint32_t doc_bits = p->widths[k];
            uint8_t *offsets = p->payload + at;
            float *parts = (float *)(void *)(offsets + gpu_layout_stream_bytes(n, doc_bits));
            const uint64_t bytes = gpu_layout_block_bytes(n, doc_bits);
            memset(offsets, 0, bytes);
            const uint32_t base = b ? r.blocks[b - 1].last_doc : UINT32_MAX;
            uint32_t doc = base;
            for (uint32_t i = 0; i < n; i++) {
                doc += r.docs[i] + 1;
                if (doc_bits) pack_value(offsets, doc_bits, i, gpu_layout_offset_of(base, doc));
                parts[i] = isn_bm25_tf_part(r.k1_plus_1, r.freqs[i] + 1, r.norms[doc]);
            }
            p->metas[k].offset = gpu_layout_meta_word(at, doc_bits);
            at += bytes;
        }
    }
}

static void *run_part(void *arg) {
    layout_part *p = arg;
    if (p->payload) write_terms(p);
    else measure_terms(p);
    return NULL;
}

/* The layout is background work (base.h): each share lowers its own thread. */
static void *run_lowered_part(void *arg) {
    isn_lower_this_thread();
    return run_part(arg);
}

/* Splits the terms into `threads` shares of about as many blocks each and runs them at once, each on a
 * lowered thread of its own. 0, or -1 with the first share's error. */
static int run_parts(const layout_part *shape, uint32_t threads, char *err, size_t err_len) {
    const isn_index *ix = shape->ix;
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    uint64_t num_blocks;
    isn_index_block_metas(ix, &num_blocks);
    if (threads < 1) threads = 1;
    if (threads > GPU_LAYOUT_MAX_THREADS) threads = GPU_LAYOUT_MAX_THREADS;
    layout_part parts[GPU_LAYOUT_MAX_THREADS];
    pthread_t ids[GPU_LAYOUT_MAX_THREADS];
    bool started[GPU_LAYOUT_MAX_THREADS] = {false};
    uint32_t t = 0;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < threads; i++) {
        parts[i] = *shape;
        parts[i].rc = 0;
        parts[i].err[0] = 0;
        parts[i].from = t;
        const uint64_t until = num_blocks * (i + 1) / threads;
        while (t < nt && (seen < until || i + 1 == threads)) {
            isn_term_stats st;
            isn_index_term_stats(ix, t++, &st);
            seen += st.num_blocks;
        }
        parts[i].to = t;
    }
    for (uint32_t i = 0; i < threads; i++)
        started[i] = pthread_create(&ids[i], NULL, run_lowered_part, &parts[i]) == 0;
    for (uint32_t i = 0; i < threads; i++) {
        if (started[i]) pthread_join(ids[i], NULL);
        else run_part(&parts[i]); /* no thread to be had: this one does the share, at its own priority */
    }
    for (uint32_t i = 0; i < threads; i++)
        if (parts[i].rc != 0) {
            snprintf(err, err_len, "%s", parts[i].err);
            return -1;
        }
    return 0;
}

int gpu_layout_measure(const isn_index *ix, uint8_t *widths, uint32_t threads, char *err, size_t err_len) {
    layout_part shape = {.ix = ix, .widths = widths};
    return run_parts(&shape, threads, err, err_len);
}

int gpu_layout_write(const isn_index *ix, const uint8_t *widths, const uint32_t *term_blocks, uint8_t *payload,
                     isn_block_meta *metas, uint32_t threads, char *err, size_t err_len) {
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    uint64_t *term_offset = malloc((nt ? nt : 1) * sizeof *term_offset);
    if (term_offset == NULL) {
        snprintf(err, err_len, "GPU backend: out of memory for the device layout's list offsets");
        return -1;
    }
    uint64_t at = 0;
    for (uint32_t t = 0; t < nt; t++) {
        term_offset[t] = at;
        at += gpu_layout_list_bytes(ix, widths, t, term_blocks[t]);
    }
    layout_part shape = {.ix = ix, .widths = (uint8_t *)widths, .term_blocks = term_blocks, .term_offset = term_offset,
                         .payload = payload, .metas = metas};
    int rc = run_parts(&shape, threads, err, err_len);
    free(term_offset);
    return rc;
}

uint64_t isn_gpu_list_bytes(const isn_index *ix, uint32_t term_id, uint32_t blocks) {
    if (term_id >= isn_index_get_info(ix)->num_terms) return 0;
    term_reader r;
    open_reader(&r, ix, term_id);
    char err[128];
    uint64_t bytes = 0;
    for (uint32_t b = 0; b < blocks && b < r.num_blocks; b++) {
        const uint32_t n = read_block(&r, term_id, b, false, err, sizeof err);
        if (n == 0) return 0;
        bytes += gpu_layout_block_bytes(n, offset_width(r.docs, n));
    }
    return bytes;
}
