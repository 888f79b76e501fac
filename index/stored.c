/* Stored fields, reader side: the section's structure checked at open, one document's text fetched by
 * decompressing its block, and the deep check of every block for isn_index_verify (format.h). */
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/reader.h"

int isn_index_check_stored(isn_index *ix, const uint8_t *section, uint64_t bytes, char *err, size_t err_len) {
    if (bytes == 0) return 0;
    const isn_meta *m = ix->meta;
    if (bytes < sizeof(isn_stored_header)) return isn_error(err, err_len, "section 'stored' is shorter than its header");
    const isn_stored_header *h = (const isn_stored_header *)section;
    if (h->codec != ISN_STORED_CODEC_LZ4)
        return isn_error(err, err_len, "section 'stored': unknown compression %u", h->codec);
    if (h->num_fields == 0 || h->num_fields > m->num_fields)
        return isn_error(err, err_len, "section 'stored': %u stored fields of %u", h->num_fields, m->num_fields);
    for (uint32_t i = 0; i < h->num_fields; i++)
        if (h->fields[i] >= m->num_fields || (i && h->fields[i] <= h->fields[i - 1]))
            return isn_error(err, err_len, "section 'stored': stored field %u is not an indexed field in order", i);
    if (h->max_block_bytes > ISN_STORED_MAX_BLOCK)
        return isn_error(err, err_len, "section 'stored': blocks of %u bytes (at most %u)", h->max_block_bytes,
                         ISN_STORED_MAX_BLOCK);
    uint64_t table_bytes = ((uint64_t)h->num_blocks + 1) * sizeof(isn_stored_block);
    if (h->num_blocks > m->num_docs || (m->num_docs && h->num_blocks == 0) || table_bytes > bytes - sizeof *h)
        return isn_error(err, err_len, "section 'stored': %u blocks do not fit %u documents and the section",
                         h->num_blocks, m->num_docs);
    const isn_stored_block *blocks = (const isn_stored_block *)(section + sizeof *h);
    uint64_t data_bytes = bytes - sizeof *h - table_bytes;
    uint32_t largest = 0;
    for (uint32_t b = 0; b < h->num_blocks; b++) {
        const isn_stored_block *cur = &blocks[b], *next = &blocks[b + 1];
        uint32_t docs = next->first_doc - cur->first_doc;
        /* every document takes a length byte per field at least, every compressed block a byte */
        if ((b == 0 && (cur->first_doc != 0 || cur->offset != 0)) || next->first_doc <= cur->first_doc ||
            next->first_doc > m->num_docs || next->offset <= cur->offset || next->offset > data_bytes ||
            cur->raw_bytes > h->max_block_bytes || (uint64_t)docs * h->num_fields > cur->raw_bytes ||
            next->offset - cur->offset > (uint64_t)LZ4_compressBound((int)cur->raw_bytes))
            return isn_error(err, err_len, "section 'stored': block %u is out of order or range", b);
        if (cur->raw_bytes > largest) largest = cur->raw_bytes;
    }
    /* the scratch every fetch takes is this size: it must be the real largest block, not a claim */
    if (h->max_block_bytes != largest)
        return isn_error(err, err_len, "section 'stored': largest block %u bytes, header says %u", largest, h->max_block_bytes);
    if (blocks[h->num_blocks].first_doc != m->num_docs || blocks[h->num_blocks].offset != data_bytes)
        return isn_error(err, err_len, "section 'stored': its blocks do not cover the %u documents and the data", m->num_docs);
    ix->stored = h;
    ix->stored_blocks = blocks;
    ix->stored_data = section + sizeof *h + table_bytes;
    ix->info.num_stored_fields = h->num_fields;
    for (uint32_t i = 0; i < h->num_fields; i++)
        memcpy(ix->info.stored_fields[i], m->fields[h->fields[i]], ISN_FIELD_NAME_MAX);
    return 0;
}

int isn_index_stored_slot(const isn_index *ix, const char *name) {
    for (uint32_t i = 0; i < ix->info.num_stored_fields; i++)
        if (strcmp(ix->info.stored_fields[i], name) == 0) return (int)i;
    return -1;
}

size_t isn_index_stored_scratch_bytes(const isn_index *ix) { return ix->stored ? ix->stored->max_block_bytes + 1u : 0; }

/* The block holding doc: the last whose first_doc <= doc. */
static uint32_t block_of(const isn_index *ix, uint32_t doc) {
    uint32_t lo = 0, hi = ix->stored->num_blocks;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ix->stored_blocks[mid].first_doc <= doc) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Decompresses block b into scratch: its size, or -1. */
static int decompress_block(const isn_index *ix, uint32_t b, char *scratch) {
    const isn_stored_block *blk = &ix->stored_blocks[b];
    int got = LZ4_decompress_safe((const char *)ix->stored_data + blk->offset, scratch,
                                  (int)(blk[1].offset - blk->offset), (int)blk->raw_bytes);
    return got == (int)blk->raw_bytes ? got : -1;
}

/* Reads one document's fields at *p (advanced past them); false when they overrun end. */
static bool read_doc(const uint8_t **p, const uint8_t *end, uint32_t num_fields, isn_stored_text *out) {
    for (uint32_t f = 0; f < num_fields; f++) {
        uint32_t len;
        if (!(*p = isn_varint_get(*p, end, &len)) || len > (size_t)(end - *p)) return false;
        if (out) out[f] = (isn_stored_text){(const char *)*p, len};
        *p += len;
    }
    return true;
}

int isn_index_stored_get(const isn_index *ix, uint32_t doc, void *scratch, isn_stored_text *out, char *err,
                         size_t err_len) {
    if (!ix->stored) return isn_error(err, err_len, "the index keeps no stored fields");
    if (doc >= ix->meta->num_docs) return isn_error(err, err_len, "document %u of %u", doc, ix->meta->num_docs);
    uint32_t b = block_of(ix, doc);
    int raw = decompress_block(ix, b, scratch);
    if (raw < 0) return isn_error(err, err_len, "section 'stored': block %u does not decompress", b);
    const uint8_t *p = scratch, *end = p + raw;
    uint32_t nf = ix->stored->num_fields;
    bool ok = true;
    for (uint32_t d = ix->stored_blocks[b].first_doc; ok && d < doc; d++) ok = read_doc(&p, end, nf, NULL);
    if (!ok || !read_doc(&p, end, nf, out))
        return isn_error(err, err_len, "section 'stored': block %u ends before document %u", b, doc);
    return 0;
}

int isn_index_verify_stored(const isn_index *ix, char *err, size_t err_len) {
    if (!ix->stored) return 0;
    char *scratch = malloc(isn_index_stored_scratch_bytes(ix));
    if (!scratch) return isn_error(err, err_len, "out of memory for a stored block");
    int rc = 0;
    uint32_t nf = ix->stored->num_fields;
    for (uint32_t b = 0; rc == 0 && b < ix->stored->num_blocks; b++) {
        int raw = decompress_block(ix, b, scratch);
        const uint8_t *p = (const uint8_t *)scratch, *end = p + (raw < 0 ? 0 : raw);
        bool ok = raw >= 0;
        for (uint32_t d = ix->stored_blocks[b].first_doc; ok && d < ix->stored_blocks[b + 1].first_doc; d++)
            ok = read_doc(&p, end, nf, NULL);
        if (!ok || p != end)
            rc = isn_error(err, err_len, "section 'stored': block %u does not hold exactly its documents", b);
    }
    free(scratch);
    return rc;
}
