/* Posting cursors: block-at-a-time decoding with skipping by block metadata. */
#include "index/reader.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline uint32_t block_count(uint32_t df, uint32_t num_blocks, uint32_t block) {
    return block + 1 == num_blocks ? df - block * ISN_BLOCK_SIZE : ISN_BLOCK_SIZE;
}

/* Gaps were stored as doc - previous - 1, the first one relative to the previous block's last doc.
 * The running sum goes four lanes at a time where SSE2 is there (every x86-64): a scalar sum is one
 * long chain of dependent adds. */
static inline const uint8_t *decode_docs(const uint8_t *p, uint32_t count, uint32_t prev, uint32_t *docs) {
    p += isn_codec_decode(p, count, docs);
    uint32_t i = 0;
#if defined(__SSE2__)
    __m128i carry = _mm_set1_epi32((int)prev), one = _mm_set1_epi32(1);
    for (; i + 4 <= count; i += 4) {
        __m128i v = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(docs + i)), one);
        v = _mm_add_epi32(v, _mm_slli_si128(v, 4));
        v = _mm_add_epi32(v, _mm_slli_si128(v, 8));
        v = _mm_add_epi32(v, carry);
        _mm_storeu_si128((__m128i *)(docs + i), v);
        carry = _mm_shuffle_epi32(v, _MM_SHUFFLE(3, 3, 3, 3));
    }
    prev = (uint32_t)_mm_cvtsi128_si32(carry);
#endif
    for (; i < count; i++) {
        prev += docs[i] + 1;
        docs[i] = prev;
    }
    return p;
}

const uint8_t *isn_block_decode_docs(const isn_index *ix, const isn_term_entry *term, uint32_t block, uint32_t *docs,
                                     uint32_t *count) {
    const isn_block_meta *blocks = ix->blocks + term->first_block;
    *count = block_count(term->df, isn_term_num_blocks(term), block);
    uint32_t prev = block ? blocks[block - 1].last_doc : UINT32_MAX;
    return decode_docs(ix->postings + blocks[block].offset, *count, prev, docs);
}

static void load_block(isn_cursor *c, uint32_t block) {
    uint32_t prev = block ? c->blocks[block - 1].last_doc : UINT32_MAX;
    c->count = block_count(c->df, c->num_blocks, block);
    c->freq_bytes = decode_docs(c->payload + c->blocks[block].offset, c->count, prev, c->docs);
    c->freqs_ready = false;
    c->decoded_block = block;
    c->block = block;
}

void isn_cursor_open_list(isn_cursor *c, const uint8_t *payload, const isn_block_meta *blocks, uint32_t df) {
    c->payload = payload;
    c->blocks = blocks;
    c->num_blocks = (df + ISN_BLOCK_SIZE - 1) / ISN_BLOCK_SIZE;
    c->df = df;
    c->shallow_block = 0;
    c->norms = NULL;
    if (df == 0) {
        c->block = c->pos = c->count = 0;
        c->decoded_block = UINT32_MAX;
        c->doc = ISN_DOC_END;
        c->freqs_ready = false;
        return;
    }
    load_block(c, 0);
    c->pos = 0;
    c->doc = c->docs[0];
}

void isn_cursor_open(isn_cursor *c, const isn_index *ix, uint32_t term_id) {
    const isn_term_entry *e = &ix->terms[term_id];
    c->payload = ix->postings;
    c->blocks = ix->blocks + e->first_block;
    c->num_blocks = isn_term_num_blocks(e);
    c->df = e->df;
    c->shallow_block = 0;
    c->norms = ix->norms;
    load_block(c, 0);
    c->pos = 0;
    c->doc = c->docs[0];
}

uint32_t isn_cursor_next(isn_cursor *c) {
    if (++c->pos < c->count) return c->doc = c->docs[c->pos];
    if (c->block + 1 >= c->num_blocks) {
        c->block = c->num_blocks;
        c->pos = c->count;
        return c->doc = ISN_DOC_END;
    }
    load_block(c, c->block + 1);
    c->pos = 0;
    return c->doc = c->docs[0];
}

/* First block at or after `from` whose last doc >= target (num_blocks if none): galloping, then
 * binary search, so that long skips over a long list cost O(log distance). */
static inline uint32_t find_block(const isn_block_meta *blocks, uint32_t from, uint32_t num_blocks, uint32_t target) {
    uint32_t lo = from, hi = from, step = 1;
    while (hi < num_blocks && blocks[hi].last_doc < target) {
        lo = hi + 1;
        hi += step;
        step <<= 1;
    }
    if (hi > num_blocks) hi = num_blocks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (blocks[mid].last_doc < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The target lies past the current block (the cursor is not exhausted). */
uint32_t isn_cursor_next_geq_other_block(isn_cursor *c, uint32_t target) {
    uint32_t b = find_block(c->blocks, c->block + 1, c->num_blocks, target);
    if (b >= c->num_blocks) {
        c->block = c->num_blocks;
        c->pos = c->count;
        return c->doc = ISN_DOC_END;
    }
    load_block(c, b);
    uint32_t pos = 0;
    while (c->docs[pos] < target) pos++; /* the block's last doc >= target bounds this */
    c->pos = pos;
    return c->doc = c->docs[pos];
}

const uint32_t *isn_cursor_decode_freqs(isn_cursor *c) {
    isn_codec_decode(c->freq_bytes, c->count, c->freqs);
    c->freqs_ready = true;
    return c->freqs;
}

const uint32_t *isn_cursor_block_freqs(isn_cursor *c) {
    return c->freqs_ready ? c->freqs : isn_cursor_decode_freqs(c);
}

uint32_t isn_cursor_next_block(isn_cursor *c) {
    if (c->block + 1 >= c->num_blocks) {
        c->block = c->num_blocks;
        c->pos = c->count;
        return c->doc = ISN_DOC_END;
    }
    load_block(c, c->block + 1);
    c->pos = 0;
    return c->doc = c->docs[0];
}

uint32_t isn_cursor_shallow_next_geq(isn_cursor *c, uint32_t target) {
    uint32_t from = c->shallow_block;
    uint32_t current = c->block < c->num_blocks ? c->block : c->num_blocks;
    if (from < current || (from > current && c->blocks[from - 1].last_doc >= target)) from = current;
    c->shallow_block = find_block(c->blocks, from, c->num_blocks, target);
    return c->shallow_block < c->num_blocks ? c->blocks[c->shallow_block].last_doc : ISN_DOC_END;
}

float isn_cursor_shallow_max(const isn_cursor *c) {
    return c->shallow_block < c->num_blocks ? c->blocks[c->shallow_block].max_tf_part : 0.0f;
}
