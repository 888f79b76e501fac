#include "index/list_encoder.h"

#include <errno.h>
#include <string.h>

/* A file-backed section writes out in pieces of about this size. */
#define SECTION_SPILL_BYTES (256u << 10)

int section_out_put(section_out *s, const void *p, uint64_t n) {
    if (s->error || buf_put(&s->buf, p, n) != 0) return -1;
    return section_out_spill(s);
}

static int write_out(section_out *s) {
    if (s->buf.len && fwrite(s->buf.data, 1, s->buf.len, s->file) != s->buf.len) {
        s->error = errno ? errno : EIO;
        return -1;
    }
    s->flushed += s->buf.len;
    s->buf.len = 0;
    return 0;
}

int section_out_spill(section_out *s) {
    if (s->error) return -1;
    if (!s->file || s->buf.len < SECTION_SPILL_BYTES) return 0;
    return write_out(s);
}

int section_out_finish(section_out *s) {
    if (s->error) return -1;
    if (!s->file) return 0;
    if (write_out(s) != 0) return -1;
    if (fflush(s->file) != 0) {
        s->error = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

int list_encoder_add(list_encoder *e, const uint32_t *triples, uint32_t n, const uint32_t *positions,
                     isn_term_entry *entry) {
    uint32_t nf = e->num_fields;
    entry->df = n;
    uint64_t first_block = e->num_blocks;
    if (first_block + isn_term_num_blocks(entry) > UINT32_MAX) return -1;
    entry->first_block = (uint32_t)first_block;
    e->num_blocks += isn_term_num_blocks(entry);
    bool store_meta = isn_term_num_blocks(entry) > 1; /* a single block's metadata is implied (format.h) */
    entry->cf = 0;
    entry->max_tf_part = 0.0f;

    uint32_t values[ISN_BLOCK_SIZE];
    uint8_t enc[ISN_CODEC_MAX_BLOCK_BYTES];
    uint32_t prev_last = UINT32_MAX; /* so that the first gap is doc - 0 */
    for (uint32_t start = 0; start < n; start += ISN_BLOCK_SIZE) {
        uint32_t count = n - start < ISN_BLOCK_SIZE ? n - start : ISN_BLOCK_SIZE;
        isn_block_meta meta = {.offset = section_out_len(&e->postings)};
        uint32_t prev = prev_last;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t doc = triples[3 * (start + i)];
            values[i] = doc - prev - 1;
            prev = doc;
        }
        if (section_out_put(&e->postings, enc, isn_codec_encode(values, count, enc)) != 0) return -1;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t doc = triples[3 * (start + i)], tf = triples[3 * (start + i) + 1];
            values[i] = tf - 1;
            entry->cf = tf > UINT32_MAX - entry->cf ? UINT32_MAX : entry->cf + tf;
            float part = isn_bm25_tf_part(e->k1_plus_1, tf, e->norms[doc]);
            if (part > meta.max_tf_part) meta.max_tf_part = part;
        }
        if (section_out_put(&e->postings, enc, isn_codec_encode(values, count, enc)) != 0) return -1;
        meta.last_doc = prev;
        prev_last = prev;
        if (meta.max_tf_part > entry->max_tf_part) entry->max_tf_part = meta.max_tf_part;
        if (store_meta && section_out_put(&e->block_meta, &meta, sizeof meta) != 0) return -1;

        if (!e->with_positions) continue;
        uint64_t pos_off = section_out_len(&e->positions);
        if (section_out_put(&e->pos_blocks, &pos_off, sizeof pos_off) != 0) return -1;
        out_buf *out = &e->positions.buf;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t tf = triples[3 * (start + i) + 1];
            const uint32_t *p = positions + triples[3 * (start + i) + 2];
            if (buf_reserve(out, (uint64_t)nf * 5 + (uint64_t)tf * 5) != 0) return -1;
            uint8_t *o = out->data + out->len;
            uint32_t k = 0;
            for (uint32_t f = 0; f < nf; f++) {
                uint32_t c = 0;
                while (k + c < tf && p[k + c] >> ISN_BUILD_POS_BITS == f) c++;
                o = isn_varint_put(o, c);
                uint32_t last = 0;
                for (uint32_t j = 0; j < c; j++) {
                    uint32_t pos = p[k + j] & ISN_BUILD_POS_MAX;
                    o = isn_varint_put(o, j == 0 ? pos : pos - last);
                    last = pos;
                }
                k += c;
            }
            out->len = (uint64_t)(o - out->data);
        }
        if (section_out_spill(&e->positions) != 0) return -1;
    }
    return 0;
}
