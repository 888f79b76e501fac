/* Growable section buffers and the term and lexicon encodings of format.h, shared by the index writers
 * (the builder and the CIFF import). Private to index/. */
#ifndef ISN_INDEX_SECTION_BUF_H
#define ISN_INDEX_SECTION_BUF_H

#include <stdlib.h>
#include <string.h>

#include "index/format.h"

typedef struct {
    uint8_t *data;
    uint64_t len, cap;
} out_buf;

static inline int buf_reserve(out_buf *b, uint64_t extra) {
    if (b->len + extra <= b->cap) return 0;
    uint64_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int buf_put(out_buf *b, const void *p, uint64_t n) {
    if (buf_reserve(b, n) != 0) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* A term entry as version 2 stores it (format.h). */
static inline int put_term_entry(out_buf *terms, const isn_term_entry *e) {
    uint8_t bytes[16], *p = isn_varint_put(bytes, e->df);
    p = isn_varint_put(p, e->cf - e->df);
    memcpy(p, &e->max_tf_part, sizeof e->max_tf_part);
    return buf_put(terms, bytes, (uint64_t)(p + sizeof e->max_tf_part - bytes));
}

/* Appends the term of lexicon rank `rank` (terms come in increasing byte order; prev is the one before). */
static inline int put_lexicon_term(out_buf *lex_index, out_buf *lex_data, uint32_t rank, const char *s, size_t len,
                                   const char *prev, size_t prev_len) {
    uint8_t head[2];
    if (rank % ISN_LEXICON_BLOCK == 0) {
        uint64_t off = lex_data->len;
        if (buf_put(lex_index, &off, sizeof off) != 0) return -1;
        head[0] = (uint8_t)len;
        return buf_put(lex_data, head, 1) || buf_put(lex_data, s, len);
    }
    size_t shared = 0;
    while (shared < len && shared < prev_len && s[shared] == prev[shared]) shared++;
    head[0] = (uint8_t)shared;
    head[1] = (uint8_t)(len - shared);
    return buf_put(lex_data, head, 2) || buf_put(lex_data, s + shared, len - shared);
}

/* Front-coded external id against the previous one (format.h's SEC_DOCID_TEXT). */
static inline int put_external_id(out_buf *ids, const char *id, size_t len, const char *prev, size_t prev_len) {
    size_t shared = 0;
    while (shared < len && shared < prev_len && id[shared] == prev[shared]) shared++;
    uint8_t head[10], *h = isn_varint_put(head, (uint32_t)shared);
    h = isn_varint_put(h, (uint32_t)(len - shared));
    return buf_put(ids, head, (uint64_t)(h - head)) || buf_put(ids, id + shared, len - shared);
}

#endif
