/* Per-field posting lists, derived from the positions at the first query that needs them (with the
 * per-field frequencies, positions.c): for each field and term, the documents where the term occurs in
 * that field, with its frequency there, encoded as the index encodes its own lists (blocks of doc gaps
 * and frequencies, block maxima under the field's norms), so that a field: clause walks a list of its
 * own with an ordinary cursor, skips by its blocks and prunes by their maxima, as Lucene's per-field
 * postings do; a title: clause reads the title's list, far shorter than the term's whole list. */
#include <stdlib.h>
#include <string.h>

#include "index/reader.h"
#include "index/section_buf.h"

int isn_field_postings_start(isn_field_postings_writer *w, const isn_index *ix) {
    memset(w, 0, sizeof *w);
    w->num_fields = ix->meta->num_fields;
    w->k1_plus_1 = ix->info.bm25.k1 + 1.0f;
    for (uint32_t f = 0; f < w->num_fields; f++) {
        w->terms[f] = calloc((size_t)ix->meta->num_terms + 1, sizeof(isn_term_entry));
        w->docs[f] = malloc(((size_t)ix->meta->num_docs + 1) * sizeof(uint32_t));
        w->tfs[f] = malloc(((size_t)ix->meta->num_docs + 1) * sizeof(uint32_t));
        if (!w->terms[f] || !w->docs[f] || !w->tfs[f]) return -1;
    }
    return 0;
}

/* Encodes the postings gathered for one term in one field (docs[f], tfs[f], count[f]). */
static int encode_list(isn_field_postings_writer *w, uint32_t field, uint32_t term, const float *norms) {
    uint32_t n = w->count[field];
    const uint32_t *docs = w->docs[field], *tfs = w->tfs[field];
    isn_term_entry *entry = &w->terms[field][term];
    *entry = (isn_term_entry){.df = n, .first_block = (uint32_t)(w->blocks[field].len / sizeof(isn_block_meta))};
    uint32_t values[ISN_BLOCK_SIZE];
    uint8_t enc[ISN_CODEC_MAX_BLOCK_BYTES];
    uint32_t prev = UINT32_MAX; /* the first gap is doc - 0 */
    for (uint32_t start = 0; start < n; start += ISN_BLOCK_SIZE) {
        uint32_t count = n - start < ISN_BLOCK_SIZE ? n - start : ISN_BLOCK_SIZE;
        isn_block_meta meta = {.offset = w->payload[field].len};
        for (uint32_t i = 0; i < count; i++) {
            values[i] = docs[start + i] - prev - 1;
            prev = docs[start + i];
        }
        if (buf_put(&w->payload[field], enc, isn_codec_encode(values, count, enc)) != 0) return -1;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t tf = tfs[start + i];
            values[i] = tf - 1;
            entry->cf = tf > UINT32_MAX - entry->cf ? UINT32_MAX : entry->cf + tf;
            float part = isn_bm25_tf_part(w->k1_plus_1, tf, norms[docs[start + i]]);
            if (part > meta.max_tf_part) meta.max_tf_part = part;
        }
        if (buf_put(&w->payload[field], enc, isn_codec_encode(values, count, enc)) != 0) return -1;
        meta.last_doc = prev;
        if (meta.max_tf_part > entry->max_tf_part) entry->max_tf_part = meta.max_tf_part;
        if (buf_put(&w->blocks[field], &meta, sizeof meta) != 0) return -1;
    }
    w->count[field] = 0;
    return 0;
}

int isn_field_postings_end_term(isn_field_postings_writer *w, const isn_index *ix, uint32_t term) {
    for (uint32_t f = 0; f < w->num_fields; f++)
        if (encode_list(w, f, term, ix->field_norms[f]) != 0) return -1;
    return 0;
}

int isn_field_postings_finish(isn_field_postings_writer *w, isn_index *ix) {
    static const uint8_t slack[ISN_CODEC_READ_SLACK];
    for (uint32_t f = 0; f < w->num_fields; f++) {
        if (buf_put(&w->payload[f], slack, sizeof slack) != 0) return -1;
        ix->field_payload[f] = w->payload[f].data;
        ix->field_blocks[f] = (isn_block_meta *)(void *)w->blocks[f].data;
        ix->field_terms[f] = w->terms[f];
        w->payload[f] = (out_buf){0};
        w->blocks[f] = (out_buf){0};
        w->terms[f] = NULL;
    }
    return 0;
}

void isn_field_postings_free(isn_field_postings_writer *w) {
    for (uint32_t f = 0; f < w->num_fields; f++) {
        free(w->terms[f]);
        free(w->docs[f]);
        free(w->tfs[f]);
        free(w->payload[f].data);
        free(w->blocks[f].data);
    }
    memset(w, 0, sizeof *w);
}

void isn_cursor_open_field(isn_cursor *c, const isn_index *ix, uint32_t term_id, uint32_t field) {
    const isn_term_entry *e = &ix->field_terms[field][term_id];
    isn_cursor_open_list(c, ix->field_payload[field], ix->field_blocks[field] + e->first_block, e->df);
    c->norms = ix->field_norms[field];
}

void isn_index_field_term_stats(const isn_index *ix, uint32_t term_id, uint32_t field, uint32_t *df,
                                float *max_tf_part) {
    bool known = isn_index_field_tfs(ix) && term_id < ix->meta->num_terms && field < ix->meta->num_fields;
    *df = known ? ix->field_terms[field][term_id].df : 0;
    *max_tf_part = known ? ix->field_terms[field][term_id].max_tf_part : 0.0f;
}

const float *isn_index_field_norms(const isn_index *ix, uint32_t field) {
    return isn_index_field_tfs(ix) && field < ix->meta->num_fields ? ix->field_norms[field] : NULL;
}
