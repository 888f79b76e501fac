/* CIFF export: an index as varint-delimited protobuf messages (proto/ciff.proto), packed by protobuf-c.
 *
 * A postings list is written without holding its postings: protobuf-c packs the list's term, df and cf
 * (a PostingsList with no postings), and each posting follows as one element of the repeated field 4,
 * which is the same bytes protobuf-c would write for the whole message. The length prefix needs the
 * list's size first, so each list is read twice through a cursor: once to size it, once to write it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "index/ciff_wire.h"
#include "index/format.h"
#include "proto/ciff.pb-c.h"

#define OUT_BUFFER_BYTES (1u << 20)
#define POSTINGS_TAG ((4u << 3) | CIFF_WIRE_LENGTH)

typedef struct {
    FILE *out;
    uint64_t bytes;
    bool failed;
    uint8_t *scratch; /* one packed message: a header, a list's head or a doc record */
    size_t scratch_cap;
} ciff_writer;

static void put(ciff_writer *w, const void *p, size_t n) {
    if (!w->failed && fwrite(p, 1, n, w->out) != n) w->failed = true;
    w->bytes += n;
}

static void put_varint(ciff_writer *w, uint64_t v) {
    uint8_t b[CIFF_MAX_VARINT_BYTES];
    put(w, b, ciff_varint_put(b, v));
}

/* Packs `message` into the scratch buffer; its size, or 0 when out of memory. */
static size_t pack(ciff_writer *w, const ProtobufCMessage *message) {
    size_t n = protobuf_c_message_get_packed_size(message);
    if (n > w->scratch_cap) {
        uint8_t *p = realloc(w->scratch, n);
        if (!p) return w->failed = true, 0;
        w->scratch = p;
        w->scratch_cap = n;
    }
    return protobuf_c_message_pack(message, w->scratch);
}

/* One delimited message whose first `head` bytes are in scratch and `body` more bytes follow. */
static void put_delimited_head(ciff_writer *w, size_t head, uint64_t body) {
    put_varint(w, head + body);
    put(w, w->scratch, head);
}

/* The bytes of one posting as an element of field 4, written when w is not NULL. */
static uint64_t posting_element(ciff_writer *w, uint32_t gap, uint32_t tf) {
    Ciff__Posting p = CIFF__POSTING__INIT;
    p.docid = (int32_t)gap;
    p.tf = (int32_t)tf;
    uint8_t bytes[2 * (1 + CIFF_MAX_VARINT_BYTES)];
    size_t n = ciff__posting__pack(&p, bytes);
    if (w) {
        uint8_t tag = POSTINGS_TAG;
        put(w, &tag, 1);
        put_varint(w, n);
        put(w, bytes, n);
    }
    return 1 + ciff_varint_size(n) + n;
}

/* Walks a term's postings as CIFF d-gaps: sizes them (w NULL) or writes them. *cf gets the sum of
 * their frequencies (the index's own cf saturates at 2^32 - 1). */
static uint64_t walk_postings(const isn_index *ix, uint32_t term, isn_cursor *c, ciff_writer *w, uint64_t *cf) {
    isn_cursor_open(c, ix, term);
    uint64_t bytes = 0;
    uint32_t prev = 0;
    *cf = 0;
    for (uint32_t doc = c->doc; doc != ISN_DOC_END; doc = isn_cursor_next(c)) {
        uint32_t tf = isn_cursor_freq(c);
        bytes += posting_element(w, doc - prev, tf);
        *cf += tf;
        prev = doc;
    }
    return bytes;
}

static void describe(const isn_index_info *in, const char *dir, char *out, size_t len) {
    if (in->analyzer.pretokenized)
        snprintf(out, len, "ISN index %s, exported by isn-index export-ciff; terms as imported (pretokenized: "
                 "queries are terms separated by spaces, matched exactly)", dir);
    else
        snprintf(out, len, "ISN index %s, exported by isn-index export-ciff; analyzer: Unicode NFKC and case folding, "
                 "tokens of letters and digits cut at %u bytes, %s, %s; doclength = tokens kept after stopwords",
                 dir, in->analyzer.max_token_bytes, in->analyzer.stem ? "Snowball English stemming" : "no stemming",
                 in->analyzer.stopwords ? "Lucene's 33 English stopwords removed" : "stopwords kept");
}

int isn_ciff_export(const char *index_dir, const char *ciff_path, isn_ciff_summary *summary, char *err,
                    size_t err_len) {
    double start = isn_now_seconds();
    isn_index *ix = isn_index_open(index_dir, err, err_len);
    if (!ix) return -1;
    const isn_index_info *in = isn_index_get_info(ix);
    if (in->num_docs > INT32_MAX || in->num_terms > INT32_MAX) {
        isn_index_close(ix);
        return isn_error(err, err_len, "%s: %u documents and %u terms: CIFF counts are int32", index_dir, in->num_docs,
                         in->num_terms);
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", ciff_path);
    ciff_writer w = {.out = fopen(tmp, "wb")};
    char *io_buffer = malloc(OUT_BUFFER_BYTES);
    isn_cursor *cursor = malloc(sizeof *cursor);
    char *id = NULL;
    size_t id_cap = 0;
    int rc = -1;
    if (!w.out || !io_buffer || !cursor) {
        isn_error(err, err_len, "cannot create %s: %s", tmp, w.out ? "out of memory" : strerror(errno));
        goto done;
    }
    setvbuf(w.out, io_buffer, _IOFBF, OUT_BUFFER_BYTES);

    char description[512];
    describe(in, index_dir, description, sizeof description);
    Ciff__Header header = CIFF__HEADER__INIT;
    header.version = 1;
    header.num_postings_lists = header.total_postings_lists = (int32_t)in->num_terms;
    header.num_docs = header.total_docs = (int32_t)in->num_docs;
    header.total_terms_in_collection = (int64_t)in->total_doc_len;
    header.average_doclength = in->num_docs ? (double)in->total_doc_len / in->num_docs : 0.0;
    header.description = description;
    put_delimited_head(&w, pack(&w, &header.base), 0);

    uint64_t postings = 0;
    char term[ISN_MAX_TERM_BYTES + 1];
    for (uint32_t t = 0; t < in->num_terms && !w.failed; t++) {
        isn_term_stats stats;
        isn_index_term_stats(ix, t, &stats);
        isn_index_term_text(ix, t, term, sizeof term);
        Ciff__PostingsList list = CIFF__POSTINGS_LIST__INIT;
        list.term = term;
        uint64_t cf, body = walk_postings(ix, t, cursor, NULL, &cf);
        list.df = stats.df;
        list.cf = (int64_t)cf;
        put_delimited_head(&w, pack(&w, &list.base), body);
        walk_postings(ix, t, cursor, &w, &cf);
        postings += stats.df;
    }
    for (uint32_t d = 0; d < in->num_docs && !w.failed; d++) {
        size_t len;
        const char *ext = isn_index_doc_id(ix, d, &len);
        if (len + 1 > id_cap) {
            char *p = realloc(id, len + 1);
            if (!p) {
                w.failed = true;
                break;
            }
            id = p;
            id_cap = len + 1;
        }
        memcpy(id, ext, len);
        id[len] = '\0';
        Ciff__DocRecord record = CIFF__DOC_RECORD__INIT;
        record.docid = (int32_t)d;
        record.collection_docid = id;
        record.doclength = (int32_t)isn_index_doc_len(ix, d);
        put_delimited_head(&w, pack(&w, &record.base), 0);
    }
    if (fclose(w.out) != 0) w.failed = true;
    w.out = NULL;
    if (w.failed || rename(tmp, ciff_path) != 0) {
        isn_error(err, err_len, "cannot write %s: %s", ciff_path, errno ? strerror(errno) : "out of memory");
        unlink(tmp);
        goto done;
    }
    if (summary) {
        memset(summary, 0, sizeof *summary);
        summary->postings_lists = in->num_terms;
        summary->docs = in->num_docs;
        summary->postings = postings;
        summary->ciff_bytes = w.bytes;
        summary->index_bytes = in->file_bytes;
        summary->seconds = isn_now_seconds() - start;
        snprintf(summary->description, sizeof summary->description, "%s", description);
    }
    rc = 0;
done:
    if (w.out) {
        fclose(w.out);
        unlink(tmp);
    }
    free(io_buffer);
    free(cursor);
    free(id);
    free(w.scratch);
    isn_index_close(ix);
    return rc;
}
