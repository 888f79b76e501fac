/* Stored fields, builder side: each document's stored text kept as it is added, then written as
 * section 'stored' in the index's document order (format.h). LZ4 high compression: building is done
 * once, and its blocks decompress as fast as plain LZ4's. */
#include <lz4.h>
#include <lz4hc.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

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
static int flush_block(stored_writer *w) {
    byte_buffer *raw = &w->raw;
    int bound = LZ4_compressBound((int)raw->len);
    out_buf *data = &w->data.buf;
    if (buf_reserve(data, (uint64_t)bound) != 0) return -1;
    int got = LZ4_compress_HC((const char *)raw->data, (char *)data->data + data->len, (int)raw->len, bound,
                              LZ4HC_CLEVEL_DEFAULT);
    if (got <= 0) return -1;
    isn_stored_block entry = {.first_doc = w->block_first, .raw_bytes = (uint32_t)raw->len, .offset = section_out_len(&w->data)};
    if (!buffer_append(&w->table, &entry, sizeof entry)) return -1;
    data->len += (size_t)got;
    if (raw->len > w->header.max_block_bytes) w->header.max_block_bytes = (uint32_t)raw->len;
    raw->len = 0;
    return section_out_spill(&w->data);
}

void stored_writer_init(stored_writer *w, const uint32_t *slots, uint32_t num_stored, FILE *data_file) {
    memset(w, 0, sizeof *w);
    w->header = (isn_stored_header){.num_fields = num_stored, .codec = ISN_STORED_CODEC_LZ4};
    for (uint32_t i = 0; i < num_stored; i++) w->header.fields[i] = (uint8_t)slots[i];
    w->data.file = data_file;
}

int stored_writer_add(stored_writer *w, const uint8_t *raw_doc, uint64_t raw_bytes, uint64_t text_bytes, const char *id,
                      size_t id_len, char *err, size_t err_len) {
    uint32_t nw = w->num_docs;
    uint64_t doc_bytes = text_bytes + 5u * w->header.num_fields;
    if (doc_bytes > ISN_STORED_MAX_BLOCK)
        return isn_error(err, err_len, "document \"%.*s\": %llu bytes of stored text (at most %u)",
                         (int)(id_len > 80 ? 80 : id_len), id, (unsigned long long)doc_bytes, ISN_STORED_MAX_BLOCK);
    /* A document never straddles blocks; a block closes once it reaches the target or would pass the maximum. */
    if (w->raw.len && w->raw.len + doc_bytes > ISN_STORED_MAX_BLOCK) {
        if (flush_block(w) != 0) goto failed;
        w->block_first = nw;
    }
    if (!buffer_append(&w->raw, raw_doc, raw_bytes)) goto failed;
    w->num_docs++;
    if (w->raw.len >= ISN_STORED_BLOCK_TARGET) {
        if (flush_block(w) != 0) goto failed;
        w->block_first = nw + 1;
    }
    return 0;
failed:
    if (w->data.error) return isn_error(err, err_len, "cannot write the stored fields: %s", strerror(w->data.error));
    return isn_error(err, err_len, "out of memory while compressing the stored fields");
}

int stored_writer_finish(stored_writer *w, char *err, size_t err_len) {
    if (w->raw.len && flush_block(w) != 0) goto failed;
    w->header.num_blocks = (uint32_t)(w->table.len / sizeof(isn_stored_block));
    isn_stored_block sentinel = {.first_doc = w->num_docs, .offset = section_out_len(&w->data)};
    byte_buffer head = {0};
    if (!buffer_append(&head, &w->header, sizeof w->header) || !buffer_append(&head, w->table.data, w->table.len) ||
        !buffer_append(&head, &sentinel, sizeof sentinel)) {
        buffer_free(&head);
        goto failed;
    }
    buffer_free(&w->table);
    w->table = head; /* the section's first piece now: header, block table, sentinel */
    if (section_out_finish(&w->data) != 0) goto failed;
    return 0;
failed:
    if (w->data.error) return isn_error(err, err_len, "cannot write the stored fields: %s", strerror(w->data.error));
    return isn_error(err, err_len, "out of memory while compressing the stored fields");
}

void stored_writer_free(stored_writer *w) {
    buffer_free(&w->raw);
    buffer_free(&w->table);
    free(w->data.buf.data);
    memset(w, 0, sizeof *w);
}

int isn_builder_write_stored(const isn_builder *b, const uint32_t *old_of_new, void **section, uint64_t *bytes,
                             char *err, size_t err_len) {
    *section = NULL;
    *bytes = 0;
    uint32_t ns = b->options.num_stored, nd = b->num_docs;
    if (ns == 0) return 0;
    stored_writer w;
    stored_writer_init(&w, b->stored_slots, ns, NULL);
    byte_buffer doc = {0};
    int rc = -1;
    for (uint32_t nw = 0; nw < nd; nw++) {
        const uint64_t *offs = b->stored_offs + (uint64_t)old_of_new[nw] * ns;
        doc.len = 0;
        if (!buffer_reserve(&doc, offs[ns] - offs[0] + 5u * ns)) {
            isn_error(err, err_len, "out of memory while compressing the stored fields");
            goto done;
        }
        for (uint32_t i = 0; i < ns; i++) {
            uint64_t len = offs[i + 1] - offs[i];
            doc.len = (size_t)(isn_varint_put(doc.data + doc.len, (uint32_t)len) - doc.data);
            if (len) memcpy(doc.data + doc.len, b->stored_text.data + offs[i], len);
            doc.len += len;
        }
        size_t id_len;
        const char *id = isn_strtab_get(&b->ids, old_of_new[nw], &id_len);
        if (stored_writer_add(&w, doc.data, doc.len, offs[ns] - offs[0], id, id_len, err, err_len) != 0) goto done;
    }
    if (stored_writer_finish(&w, err, err_len) != 0) goto done;
    uint64_t total = w.table.len + w.data.buf.len;
    uint8_t *out = malloc(total);
    if (!out) {
        isn_error(err, err_len, "out of memory while compressing the stored fields");
        goto done;
    }
    memcpy(out, w.table.data, w.table.len);
    if (w.data.buf.len) memcpy(out + w.table.len, w.data.buf.data, w.data.buf.len);
    *section = out;
    *bytes = total;
    rc = 0;
done:
    buffer_free(&doc);
    stored_writer_free(&w);
    return rc;
}
