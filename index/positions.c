/* Positions per posting and field (second-stage features read them; the first stage never does). */
#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "index/reader.h"

/* Skips `count` varints: each ends at its first byte below 0x80, so counting those is enough (phrase and
 * field: clauses skip the positions of every posting they pass). NULL when the section ends first. */
static const uint8_t *skip_varints(const uint8_t *p, const uint8_t *end, uint32_t count) {
#ifdef __SSE2__
    /* 16 bytes at a time while they end fewer varints than are left to skip */
    while (count > 16 && end - p >= 16) {
        uint32_t ends = ~(uint32_t)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(const void *)p)) & 0xffffu;
        count -= (uint32_t)__builtin_popcount(ends);
        p += 16;
    }
#endif
    while (count && p < end) count -= *p++ < 0x80;
    return count ? NULL : p;
}

/* Reads `count` position gaps into *mask (bit p % 16 of each position p); the end, or NULL when the
 * section ends first. */
static const uint8_t *positions_mask(const uint8_t *p, const uint8_t *end, uint32_t count, uint32_t *mask) {
    uint32_t pos = 0;
    for (uint32_t j = 0; j < count && p; j++) {
        uint32_t gap = 0;
        p = isn_varint_get(p, end, &gap);
        pos += gap;
        *mask |= 1u << (pos & 15);
    }
    return p;
}

/* Skips one posting's positions (every field); NULL when the section is malformed. */
static const uint8_t *skip_posting(const uint8_t *p, const uint8_t *end, uint32_t num_fields) {
    for (uint32_t f = 0; f < num_fields && p; f++) {
        uint32_t count;
        p = isn_varint_get(p, end, &count);
        if (p) p = skip_varints(p, end, count);
    }
    return p;
}

/* One field's positions at p (count, then gaps): at most cap into out; returns the count (0 when
 * malformed). cap 0 stops at the count (a field: clause's frequency needs no more). */
static uint32_t read_field_positions(const uint8_t *p, const uint8_t *end, uint32_t *out, uint32_t cap) {
    uint32_t n = 0, pos = 0;
    if (!p || !(p = isn_varint_get(p, end, &n))) return 0;
    if (cap == 0) return n;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t gap;
        if (!(p = isn_varint_get(p, end, &gap))) return j < cap ? j : cap;
        pos = j == 0 ? gap : pos + gap;
        if (j < cap) out[j] = pos;
    }
    return n;
}

uint32_t isn_index_positions(const isn_index *ix, uint32_t term_id, uint32_t doc, uint32_t field, uint32_t *out,
                             uint32_t cap) {
    if (!ix->pos_blocks || term_id >= ix->meta->num_terms || field >= ix->meta->num_fields) return 0;
    const isn_term_entry *e = &ix->terms[term_id];
    const isn_block_meta *blocks = ix->blocks + e->first_block;
    uint32_t b = 0;
    uint32_t num_blocks = isn_term_num_blocks(e);
    while (b < num_blocks && blocks[b].last_doc < doc) b++;
    if (b == num_blocks) return 0;
    uint32_t docs[ISN_BLOCK_SIZE], count;
    isn_block_decode_docs(ix, e, b, docs, &count);
    uint32_t i = 0;
    while (i < count && docs[i] < doc) i++;
    if (i == count || docs[i] != doc) return 0;

    const uint8_t *end = ix->positions + ix->positions_bytes;
    const uint8_t *p = ix->positions + ix->pos_blocks[e->first_block + b];
    uint32_t nf = ix->meta->num_fields;
    for (uint32_t k = 0; k < i && p; k++) p = skip_posting(p, end, nf);
    for (uint32_t f = 0; f < field && p; f++) p = skip_posting(p, end, 1);
    return read_field_positions(p, end, out, cap);
}

void isn_positions_cursor_open(isn_positions_cursor *pc, const isn_index *ix, uint32_t term_id) {
    pc->index = ix;
    pc->first_block = term_id < ix->meta->num_terms ? ix->terms[term_id].first_block : 0;
    pc->block = UINT32_MAX;
    pc->posting = 0;
    pc->at = ix->pos_blocks ? ix->positions : NULL;
    /* the offsets and masks are published with field_tfs */
    bool derived = atomic_load_explicit(&ix->field_tfs, memory_order_acquire) && ix->posting_positions;
    pc->postings = derived && term_id < ix->meta->num_terms ? ix->posting_positions + ix->term_first_posting[term_id] : NULL;
}

uint32_t isn_positions_cursor_read(isn_positions_cursor *pc, isn_cursor *cursor, uint32_t field, uint32_t *out,
                                   uint32_t cap) {
    const isn_index *ix = pc->index;
    if (!pc->at || cursor->doc == ISN_DOC_END || field >= ix->meta->num_fields) return 0;
    const uint8_t *end = ix->positions + ix->positions_bytes;
    uint32_t nf = ix->meta->num_fields;
    if (pc->block != cursor->block || pc->posting > cursor->pos) {
        uint64_t offset = ix->pos_blocks[pc->first_block + cursor->block];
        if (offset >= ix->positions_bytes) {
            pc->at = NULL;
            return 0;
        }
        pc->at = ix->positions + offset;
        pc->block = cursor->block;
        pc->posting = 0;
    }
    if (pc->posting < cursor->pos && pc->postings) {
        /* the offset from the block's positions: no skipping over those before */
        uint16_t offset = (uint16_t)pc->postings[(uint64_t)cursor->block * ISN_BLOCK_SIZE + cursor->pos];
        if (offset != ISN_POS_OFFSET_FAR) {
            pc->at = ix->positions + ix->pos_blocks[pc->first_block + cursor->block] + offset;
            pc->posting = cursor->pos;
        }
    }
    if (pc->posting < cursor->pos) {
        /* a posting's positions are a count per field and a gap per occurrence: nf + tf varints */
        const uint32_t *freqs = isn_cursor_block_freqs(cursor);
        uint32_t varints = 0;
        for (uint32_t i = pc->posting; i < cursor->pos; i++) varints += nf + freqs[i] + 1;
        pc->at = skip_varints(pc->at, end, varints);
        pc->posting = cursor->pos;
    }
    const uint8_t *p = pc->at;
    for (uint32_t f = 0; f < field && p; f++) p = skip_posting(p, end, 1);
    return read_field_positions(p, end, out, cap);
}

/* Per field, the documents where it is not empty, their average length and each document's norm. */
static int count_field_docs(isn_index *ix) {
    const isn_meta *m = ix->meta;
    for (uint32_t f = 0; f < m->num_fields; f++) {
        uint32_t with = 0;
        uint64_t total = 0;
        for (uint32_t d = 0; d < m->num_docs; d++) {
            uint32_t len = ix->doc_lens[(size_t)d * m->num_fields + f];
            with += len > 0;
            total += len;
        }
        ix->field_avg_len[f] = with ? (float)((double)total / with) : 1.0f;
        ix->field_doc_count[f] = with ? with : 1;
        float *norms = malloc(((size_t)m->num_docs + 1) * sizeof *norms);
        if (!norms) return -1;
        for (uint32_t d = 0; d < m->num_docs; d++)
            norms[d] = isn_bm25_doc_norm(&ix->info.bm25, ix->doc_lens[(size_t)d * m->num_fields + f], ix->field_avg_len[f]);
        ix->field_norms[f] = norms;
    }
    return 0;
}

static void free_field_data(isn_index *ix) {
    for (uint32_t f = 0; f < ISN_MAX_FIELDS; f++) {
        free(ix->field_norms[f]);
        ix->field_norms[f] = NULL;
    }
}

/* One pass over the positions section, counting each posting's positions per field, and with them each
 * field's own posting lists (field_postings.c). */
static uint8_t *count_field_tfs(isn_index *ix) {
    const isn_meta *m = ix->meta;
    uint32_t nf = m->num_fields;
    size_t bytes = (size_t)(m->num_postings * nf);
    uint8_t *tfs = malloc(bytes ? bytes : 1);
    uint64_t *first = malloc(((size_t)m->num_terms + 1) * sizeof *first);
    uint32_t *postings = malloc(m->num_postings ? m->num_postings * sizeof *postings : 1);
    isn_field_postings_writer w = {0};
    int ok = tfs && first && postings && count_field_docs(ix) == 0 && isn_field_postings_start(&w, ix) == 0;
    const uint8_t *end = ix->positions + ix->positions_bytes;
    uint64_t posting = 0;
    uint32_t docs[ISN_BLOCK_SIZE];
    for (uint32_t t = 0; ok && t < m->num_terms; t++) {
        if (atomic_load_explicit(&ix->field_derive_stop, memory_order_relaxed)) {
            ok = false; /* the index is closing */
            break;
        }
        const isn_term_entry *e = &ix->terms[t];
        first[t] = posting;
        uint32_t blocks = isn_term_num_blocks(e);
        for (uint32_t b = 0; b < blocks; b++) {
            uint32_t count = b + 1 == blocks ? e->df - b * ISN_BLOCK_SIZE : ISN_BLOCK_SIZE, decoded = 0;
            isn_block_decode_docs(ix, e, b, docs, &decoded);
            uint64_t offset = ix->pos_blocks[e->first_block + b];
            const uint8_t *p = offset < ix->positions_bytes ? ix->positions + offset : NULL, *block_start = p;
            for (uint32_t i = 0; i < count; i++, posting++) {
                uint32_t at = p && p - block_start < ISN_POS_OFFSET_FAR ? (uint32_t)(p - block_start) : ISN_POS_OFFSET_FAR;
                uint32_t mask = 0;
                for (uint32_t f = 0; f < nf; f++) {
                    uint32_t n = 0;
                    if (p && (p = isn_varint_get(p, end, &n))) p = positions_mask(p, end, n, &mask);
                    /* a malformed block reads as the cap: those postings go back to the positions */
                    tfs[posting * nf + f] = !p || n >= ISN_FIELD_TF_CAP ? ISN_FIELD_TF_CAP : (uint8_t)n;
                    if (!p || n == 0 || i >= decoded) continue;
                    w.docs[f][w.count[f]] = docs[i];
                    w.tfs[f][w.count[f]++] = n;
                }
                postings[posting] = at | (p ? mask : 0xffffu) << 16;
            }
        }
        ok = isn_field_postings_end_term(&w, ix, t) == 0;
    }
    ok = ok && isn_field_postings_finish(&w, ix) == 0;
    isn_field_postings_free(&w);
    if (!ok) {
        free(tfs);
        free(first);
        free(postings);
        free_field_data(ix);
        return NULL;
    }
    first[m->num_terms] = posting;
    ix->term_first_posting = first;
    ix->posting_positions = postings;
    return tfs;
}

const uint8_t *isn_index_field_tfs(const isn_index *ix) {
    uint8_t *tfs = atomic_load_explicit(&ix->field_tfs, memory_order_acquire);
    if (tfs || !ix->pos_blocks) return tfs;
    isn_index *writable = (isn_index *)(uintptr_t)ix; /* built once, then read-only */
    pthread_mutex_lock(&writable->field_tfs_lock);
    tfs = atomic_load_explicit(&writable->field_tfs, memory_order_acquire);
    if (!tfs && !writable->field_tfs_tried) {
        writable->field_tfs_tried = true;
        tfs = count_field_tfs(writable);
        atomic_store_explicit(&writable->field_tfs, tfs, memory_order_release);
    }
    pthread_mutex_unlock(&writable->field_tfs_lock);
    return tfs;
}

const uint8_t *isn_index_field_tfs_if_ready(const isn_index *ix) {
    return atomic_load_explicit(&ix->field_tfs, memory_order_acquire);
}

static void *derive_field_data(void *arg) {
    (void)pthread_setname_np(pthread_self(), "isn-derive");
    isn_lower_this_thread();
    (void)isn_index_field_tfs(arg);
    return NULL;
}

int isn_index_derive_field_data_in_background(isn_index *ix) {
    if (!ix->pos_blocks || ix->field_deriver_started) return 0;
    if (pthread_create(&ix->field_deriver, NULL, derive_field_data, ix) != 0) return -1;
    ix->field_deriver_started = true;
    return 0;
}

void isn_index_stop_deriving(isn_index *ix) {
    if (!ix->field_deriver_started) return;
    atomic_store_explicit(&ix->field_derive_stop, true, memory_order_relaxed);
    pthread_join(ix->field_deriver, NULL);
    ix->field_deriver_started = false;
}

uint64_t isn_index_term_first_posting(const isn_index *ix, uint32_t term_id) {
    return ix->term_first_posting && term_id < ix->meta->num_terms ? ix->term_first_posting[term_id] : 0;
}

void isn_index_field_doc_stats(const isn_index *ix, uint32_t field, uint32_t *doc_count, float *avg_len) {
    bool known = isn_index_field_tfs(ix) && field < ix->meta->num_fields;
    *doc_count = known ? ix->field_doc_count[field] : 1;
    *avg_len = known ? ix->field_avg_len[field] : 1.0f;
}
