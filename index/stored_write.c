/* Stored fields, builder side: each document's stored text kept as it is added, then written as
 * section 'stored' in the index's document order (format.h). LZ4 high compression: building is done
 * once, and its blocks decompress as fast as plain LZ4's. */
#include <lz4.h>
#include <lz4hc.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/builder.h"
#include "index/format.h"

int isn_builder_store(isn_builder *b, const char *const *fields, const size_t *field_lens) {
    uint32_t ns = b->options.num_stored;
    if (ns == 0) return 0;
    uint64_t need = ((uint64_t)b->num_docs + 1) * ns + 1;
    if (need > b->stored_offs_cap) {
        uint64_t cap = b->stored_offs_cap ? b->stored_offs_cap * 2 : 4096;
        while (cap < need) cap *= 2;
        uint64_t *offs = realloc(b->stored_offs, cap * sizeof *offs);
        if (!offs) return -1;
        b->stored_offs = offs;
        b->stored_offs_cap = cap;
    }
    uint64_t *offs = b->stored_offs + (uint64_t)b->num_docs * ns;
    offs[0] = b->stored_text.len;
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t f = b->stored_slots[i];
        if (fields[f] && field_lens[f] && !buffer_append(&b->stored_text, fields[f], field_lens[f])) return -1;
        offs[i + 1] = b->stored_text.len;
    }
    return 0;
}

/* Compresses the raw block into data and records it in the block table. */
static int flush_block(byte_buffer *raw, byte_buffer *data, byte_buffer *table, uint32_t first_doc, uint32_t *max_block) {
    int bound = LZ4_compressBound((int)raw->len);
    if (!buffer_reserve(data, (size_t)bound)) return -1;
    int got = LZ4_compress_HC((const char *)raw->data, (char *)data->data + data->len, (int)raw->len, bound,
                              LZ4HC_CLEVEL_DEFAULT);
    if (got <= 0) return -1;
    isn_stored_block entry = {.first_doc = first_doc, .raw_bytes = (uint32_t)raw->len, .offset = data->len};
    if (!buffer_append(table, &entry, sizeof entry)) return -1;
    data->len += (size_t)got;
    if (raw->len > *max_block) *max_block = (uint32_t)raw->len;
    raw->len = 0;
    return 0;
}

int isn_builder_write_stored(const isn_builder *b, const uint32_t *old_of_new, void **section, uint64_t *bytes,
                             char *err, size_t err_len) {
    *section = NULL;
    *bytes = 0;
    uint32_t ns = b->options.num_stored, nd = b->num_docs;
    if (ns == 0) return 0;
    isn_stored_header header = {.num_fields = ns, .codec = ISN_STORED_CODEC_LZ4};
    for (uint32_t i = 0; i < ns; i++) header.fields[i] = (uint8_t)b->stored_slots[i];
    byte_buffer raw = {0}, data = {0}, table = {0};
    int rc = -1;
    uint32_t block_first = 0;
    for (uint32_t nw = 0; nw < nd; nw++) {
        const uint64_t *offs = b->stored_offs + (uint64_t)old_of_new[nw] * ns;
        uint64_t doc_bytes = offs[ns] - offs[0] + 5u * ns;
        if (doc_bytes > ISN_STORED_MAX_BLOCK) {
            size_t id_len;
            const char *id = isn_strtab_get(&b->ids, old_of_new[nw], &id_len);
            isn_error(err, err_len, "document \"%.*s\": %llu bytes of stored text (at most %u)", (int)(id_len > 80 ? 80 : id_len),
                      id, (unsigned long long)doc_bytes, ISN_STORED_MAX_BLOCK);
            goto done;
        }
        /* A document never straddles blocks; a block closes once it reaches the target or would pass the maximum. */
        if (raw.len && raw.len + doc_bytes > ISN_STORED_MAX_BLOCK) {
            if (flush_block(&raw, &data, &table, block_first, &header.max_block_bytes) != 0) goto oom;
            block_first = nw;
        }
        if (!buffer_reserve(&raw, doc_bytes)) goto oom;
        for (uint32_t i = 0; i < ns; i++) {
            uint64_t len = offs[i + 1] - offs[i];
            raw.len = (uint64_t)(isn_varint_put(raw.data + raw.len, (uint32_t)len) - raw.data);
            if (len) memcpy(raw.data + raw.len, b->stored_text.data + offs[i], len);
            raw.len += len;
        }
        if (raw.len >= ISN_STORED_BLOCK_TARGET) {
            if (flush_block(&raw, &data, &table, block_first, &header.max_block_bytes) != 0) goto oom;
            block_first = nw + 1;
        }
    }
    if (raw.len && flush_block(&raw, &data, &table, block_first, &header.max_block_bytes) != 0) goto oom;
    header.num_blocks = (uint32_t)(table.len / sizeof(isn_stored_block));
    isn_stored_block sentinel = {.first_doc = nd, .offset = data.len};
    uint64_t total = sizeof header + table.len + sizeof sentinel + data.len;
    uint8_t *out = malloc(total);
    if (!out) goto oom;
    uint8_t *p = out;
    memcpy(p, &header, sizeof header), p += sizeof header;
    if (table.len) memcpy(p, table.data, table.len), p += table.len;
    memcpy(p, &sentinel, sizeof sentinel), p += sizeof sentinel;
    if (data.len) memcpy(p, data.data, data.len);
    *section = out;
    *bytes = total;
    rc = 0;
    goto done;
oom:
    isn_error(err, err_len, "out of memory while compressing the stored fields");
done:
    buffer_free(&raw);
    buffer_free(&data);
    buffer_free(&table);
    return rc;
}
