/* Positions per posting and field (second-stage features read them; the first stage never does). */
#include "index/reader.h"

/* Skips one posting's positions (every field); NULL when the section is malformed. */
static const uint8_t *skip_posting(const uint8_t *p, const uint8_t *end, uint32_t num_fields) {
    for (uint32_t f = 0; f < num_fields && p; f++) {
        uint32_t count, gap;
        p = isn_varint_get(p, end, &count);
        for (uint32_t j = 0; p && j < count; j++) p = isn_varint_get(p, end, &gap);
    }
    return p;
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
    uint32_t n = 0, pos = 0;
    if (!p || !(p = isn_varint_get(p, end, &n))) return 0;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t gap;
        if (!(p = isn_varint_get(p, end, &gap))) return j < cap ? j : cap;
        pos = j == 0 ? gap : pos + gap;
        if (j < cap) out[j] = pos;
    }
    return n;
}
