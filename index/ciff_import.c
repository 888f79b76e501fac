/* CIFF import: a stream of varint-delimited protobuf messages (proto/ciff.proto) into one index file.
 *
 * Two passes over the file, one message at a time through a bounded buffer. The first reads the
 * header, skips the postings lists by their length prefixes and reads the doc records (lengths and
 * ids): block maxima need every document's BM25 norm before the first list can be encoded. The second
 * reads each postings list field by field, posting by posting, and encodes its blocks straight into a
 * temporary payload file; the index file is then assembled from memory (documents, lexicon, term
 * entries) and the temporary files. Memory is O(documents + terms), whatever the file's size.
 *
 * In global order (--order global) a pass between them reads the lists for each document's largest
 * frequency; the documents are renumbered by their best term part, and the second pass gathers each
 * list (at most one entry per document), moves it to the new ids and sorts it before encoding it.
 *
 * Header and doc records are unpacked by protobuf-c. A postings list is walked on the wire instead:
 * protobuf-c would unpack all of a list's postings at once, one allocation each, and a frequent term
 * of a large collection holds millions. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "index/builder.h"
#include "index/ciff_wire.h"
#include "index/file_writer.h"
#include "index/format.h"
#include "index/section_buf.h"
#include "proto/ciff.pb-c.h"

/* A header or doc record holds two numbers and a short string or two. */
#define MAX_RECORD_BYTES (1u << 20)
/* A posting: two int32 varints of at most 10 bytes and their tags. */
#define MAX_POSTING_BYTES 64
#define DEFAULT_MAX_TOKEN_BYTES 64
#define MAX_EXTERNAL_ID_BYTES 4096

void isn_ciff_import_options_default(isn_ciff_import_options *o) {
    memset(o, 0, sizeof *o);
    isn_analyzer_config_default(&o->analyzer);
    o->analyzer.pretokenized = true;
    o->analyzer.stem = false;
    o->analyzer.stopwords = false;
    o->bm25 = (isn_bm25_params){ISN_BM25_DEFAULT_K1, ISN_BM25_DEFAULT_B};
}

/* ------------------------------------------------------------------ the importer */

typedef struct {
    const char *path;
    char *err;
    size_t err_len;
    ciff_stream in;
    isn_ciff_import_options options;
    /* the message being read, for error messages */
    uint64_t message;     /* 1-based: the header is message 1 */
    uint64_t message_at;  /* its byte offset */
    const char *kind;     /* "header", "postings list", "doc record" */
    /* from the header and the doc records */
    uint32_t num_lists, num_docs;
    uint64_t lists_at;    /* offset of the first postings list */
    char description[sizeof ((isn_ciff_summary *)0)->description];
    float *norms;
    uint32_t max_doc_len;
    out_buf doc_lens, doc_ids;
    uint64_t total_doc_len;
    /* the lists */
    FILE *payload, *block_meta;
    uint64_t payload_bytes, block_meta_bytes, num_blocks, num_postings;
    out_buf terms, lex_index, lex_data;
    char prev_term[ISN_MAX_TERM_BYTES];
    size_t prev_term_len;
    uint32_t longest_term;
    float k1_plus_1;
    /* the list being read */
    char term[ISN_MAX_TERM_BYTES + 1];
    size_t term_len;
    bool has_term;
    uint32_t docs[ISN_BLOCK_SIZE], tfs[ISN_BLOCK_SIZE], in_block;
    uint32_t list_blocks, prev_last;
    uint64_t list_postings, list_cf, last_doc;
    float list_max;
    isn_block_meta first_meta; /* held back: a single-block list stores no metadata (format.h) */
    /* --order global */
    uint32_t *doc_lens_read;  /* [doc]: lengths in the file's order */
    uint64_t *id_offs;        /* [doc + 1] into id_text: the ids in the file's order */
    out_buf id_text;
    uint32_t *max_tfs;        /* [doc]: filled by the scanning pass */
    bool scanning;            /* the pass over the lists that only reads frequencies */
    uint32_t *new_of_old;     /* set for the second pass: the lists are written in new ids */
    float *score_bounds;
    uint64_t *gathered;       /* the list read: (new doc << 32 | tf) */
    uint64_t gathered_len, gathered_cap;
} importer;

__attribute__((format(printf, 2, 3))) static int fail(importer *im, const char *fmt, ...) {
    char why[ISN_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (im->kind && im->has_term && strcmp(im->kind, "postings list") == 0)
        snprintf(im->err, im->err_len, "%s: message %llu (postings list \"%.40s\", byte %llu): %s", im->path,
                 (unsigned long long)im->message, im->term, (unsigned long long)im->message_at, why);
    else if (im->kind)
        snprintf(im->err, im->err_len, "%s: message %llu (%s, byte %llu): %s", im->path, (unsigned long long)im->message,
                 im->kind, (unsigned long long)im->message_at, why);
    else
        snprintf(im->err, im->err_len, "%s: %s", im->path, why);
    return -1;
}

static int oom(importer *im) { return fail(im, "out of memory"); }

/* Starts message `number` of `kind`: reads its length prefix; *end is where it ends. */
static int begin_message(importer *im, uint64_t number, const char *kind, uint64_t *end) {
    im->message = number;
    im->kind = kind;
    im->message_at = im->in.offset;
    im->has_term = false;
    if (im->in.offset >= im->in.file_bytes)
        return fail(im, "the file ends here (%llu bytes), but the header promises %u postings lists and %u doc records",
                    (unsigned long long)im->in.file_bytes, im->num_lists, im->num_docs);
    uint64_t len;
    if (!ciff_stream_varint(&im->in, &len)) return fail(im, "the length prefix is cut off or longer than 10 bytes");
    if (len > im->in.file_bytes - im->in.offset)
        return fail(im, "the length prefix says %llu bytes, but only %llu remain (a truncated file?)",
                    (unsigned long long)len, (unsigned long long)(im->in.file_bytes - im->in.offset));
    *end = im->in.offset + len;
    return 0;
}

/* Reads a whole small message (header, doc record) into buf. */
static int read_record(importer *im, uint64_t end, uint8_t *buf, size_t *len) {
    uint64_t n = end - im->in.offset;
    if (n > MAX_RECORD_BYTES) return fail(im, "%llu bytes, larger than any %s can be (%u)", (unsigned long long)n, im->kind, MAX_RECORD_BYTES);
    if (!ciff_stream_bytes(&im->in, buf, (size_t)n)) return fail(im, "cannot read %llu bytes", (unsigned long long)n);
    *len = (size_t)n;
    return 0;
}

static int read_header(importer *im, uint8_t *buf) {
    uint64_t end;
    size_t len;
    if (begin_message(im, 1, "header", &end) || read_record(im, end, buf, &len)) return -1;
    Ciff__Header *h = ciff__header__unpack(NULL, len, buf);
    if (!h) return fail(im, "not a CIFF header (protobuf-c cannot unpack it)");
    int rc = 0;
    if (h->version < 0 || h->version > 1)
        rc = fail(im, "CIFF version %d (this reader knows version 1)", h->version);
    else if (h->num_postings_lists < 0 || h->num_docs < 0)
        rc = fail(im, "negative counts: %d postings lists, %d documents", h->num_postings_lists, h->num_docs);
    else if (h->num_docs == 0 || h->num_postings_lists == 0)
        rc = fail(im, "an empty index: %d postings lists, %d documents", h->num_postings_lists, h->num_docs);
    if (h->description) snprintf(im->description, sizeof im->description, "%s", h->description);
    im->num_lists = (uint32_t)h->num_postings_lists;
    im->num_docs = (uint32_t)h->num_docs;
    ciff__header__free_unpacked(h, NULL);
    im->lists_at = im->in.offset;
    return rc;
}

/* First pass: skips the lists by their length prefixes, then reads every doc record. */
static int read_documents(importer *im, uint8_t *buf) {
    for (uint32_t i = 0; i < im->num_lists; i++) {
        uint64_t end;
        if (begin_message(im, 2 + (uint64_t)i, "postings list", &end)) return -1;
        if (!ciff_stream_seek(&im->in, end)) return fail(im, "cannot seek past it: %s", strerror(errno));
    }
    /* Each record takes 4 bytes at least (length, tag, id length, one byte of id): a count the rest
     * of the file cannot hold is refused before anything is allocated for it. */
    if ((uint64_t)im->num_docs * 4 > im->in.file_bytes - im->in.offset) {
        im->message = 2 + (uint64_t)im->num_lists;
        im->message_at = im->in.offset;
        im->kind = "doc record";
        return fail(im, "the header promises %u doc records, but only %llu bytes follow the %u postings lists", im->num_docs,
                    (unsigned long long)(im->in.file_bytes - im->in.offset), im->num_lists);
    }
    im->norms = malloc((size_t)im->num_docs * sizeof *im->norms);
    uint32_t *lens = malloc((size_t)im->num_docs * sizeof *lens);
    if (!im->norms || !lens) {
        free(lens);
        return oom(im);
    }
    char prev_id[MAX_EXTERNAL_ID_BYTES];
    size_t prev_len = 0;
    int rc = 0;
    for (uint32_t d = 0; d < im->num_docs && rc == 0; d++) {
        uint64_t end;
        size_t len;
        if (begin_message(im, 2 + (uint64_t)im->num_lists + d, "doc record", &end) || read_record(im, end, buf, &len)) {
            rc = -1;
            break;
        }
        Ciff__DocRecord *r = ciff__doc_record__unpack(NULL, len, buf);
        if (!r) {
            rc = fail(im, "not a CIFF doc record (protobuf-c cannot unpack it)");
            break;
        }
        const char *id = r->collection_docid ? r->collection_docid : "";
        size_t id_len = strlen(id);
        if (r->docid < 0 || (uint32_t)r->docid != d)
            rc = fail(im, "docid %d where %u comes next (doc records must be in doc id order 0, 1, ...)", r->docid, d);
        else if (r->doclength < 0)
            rc = fail(im, "doc %u has length %d", d, r->doclength);
        else if (id_len == 0 || id_len > MAX_EXTERNAL_ID_BYTES)
            rc = fail(im, "doc %u has a collection_docid of %zu bytes (1 to %d allowed)", d, id_len, MAX_EXTERNAL_ID_BYTES);
        else if (put_external_id(&im->doc_ids, id, id_len, prev_id, prev_len) != 0)
            rc = oom(im);
        if (rc == 0) {
            uint8_t v[5];
            lens[d] = (uint32_t)r->doclength;
            if (lens[d] > im->max_doc_len) im->max_doc_len = lens[d];
            im->total_doc_len += lens[d];
            if (buf_put(&im->doc_lens, v, (uint64_t)(isn_varint_put(v, lens[d]) - v)) != 0) rc = oom(im);
            if (im->id_offs && (buf_put(&im->id_text, id, id_len) != 0)) rc = oom(im);
            if (im->id_offs) im->id_offs[d + 1] = im->id_text.len;
            memcpy(prev_id, id, id_len);
            prev_len = id_len;
        }
        ciff__doc_record__free_unpacked(r, NULL);
    }
    if (rc == 0 && im->in.offset != im->in.file_bytes) {
        im->kind = NULL;
        rc = fail(im, "%llu bytes after the last doc record (message %llu)", (unsigned long long)(im->in.file_bytes - im->in.offset),
                  (unsigned long long)im->message);
    }
    if (rc == 0) {
        float avg = isn_avg_len(im->total_doc_len, im->num_docs);
        for (uint32_t d = 0; d < im->num_docs; d++) im->norms[d] = isn_bm25_doc_norm(&im->options.bm25, lens[d], avg);
    }
    if (im->id_offs) im->doc_lens_read = lens;
    else free(lens);
    return rc;
}

/* ------------------------------------------------------------------ global order */

/* After the scanning pass: the new ids, the documents' lengths, ids and norms in them, and the bounds. */
static int order_documents(importer *im) {
    uint32_t nd = im->num_docs;
    float avg = isn_avg_len(im->total_doc_len, nd);
    float *parts = malloc((size_t)(nd ? nd : 1) * sizeof *parts);
    uint32_t *old_of_new = malloc((size_t)(nd ? nd : 1) * sizeof *old_of_new);
    im->score_bounds = malloc((size_t)(nd ? nd : 1) * sizeof *im->score_bounds);
    int rc = 0;
    if (!parts || !old_of_new || !im->score_bounds) goto oom;
    for (uint32_t d = 0; d < nd; d++) parts[d] = global_best_part(&im->options.bm25, im->max_tfs[d], im->doc_lens_read[d], avg);
    if (!(im->new_of_old = global_order_permutation(parts, nd))) goto oom;
    for (uint32_t d = 0; d < nd; d++) old_of_new[im->new_of_old[d]] = d;
    im->doc_lens.len = im->doc_ids.len = 0;
    const char *prev = "";
    size_t prev_len = 0;
    for (uint32_t nw = 0; nw < nd; nw++) {
        uint32_t old = old_of_new[nw];
        im->score_bounds[nw] = parts[old];
        im->norms[nw] = isn_bm25_doc_norm(&im->options.bm25, im->doc_lens_read[old], avg);
        uint8_t v[5];
        const char *id = (const char *)im->id_text.data + im->id_offs[old];
        size_t id_len = im->id_offs[old + 1] - im->id_offs[old];
        if (buf_put(&im->doc_lens, v, (uint64_t)(isn_varint_put(v, im->doc_lens_read[old]) - v)) != 0 ||
            put_external_id(&im->doc_ids, id, id_len, prev, prev_len) != 0)
            goto oom;
        prev = id;
        prev_len = id_len;
    }
    global_suffix_maxima(im->score_bounds, nd);
    goto done;
oom:
    rc = oom(im);
done:
    free(parts);
    free(old_of_new);
    return rc;
}

/* ------------------------------------------------------------------ second pass: the lists */

static int flush_block(importer *im) {
    uint32_t n = im->in_block, values[ISN_BLOCK_SIZE];
    if (n == 0) return 0;
    uint8_t enc[2 * ISN_CODEC_MAX_BLOCK_BYTES];
    isn_block_meta meta = {.last_doc = im->docs[n - 1], .offset = im->payload_bytes};
    uint32_t prev = im->prev_last;
    for (uint32_t i = 0; i < n; i++) {
        values[i] = im->docs[i] - prev - 1; /* the first gap counts from -1 (format.h) */
        prev = im->docs[i];
    }
    size_t bytes = isn_codec_encode(values, n, enc);
    for (uint32_t i = 0; i < n; i++) {
        values[i] = im->tfs[i] - 1;
        float part = isn_bm25_tf_part(im->k1_plus_1, im->tfs[i], im->norms[im->docs[i]]);
        if (part > meta.max_tf_part) meta.max_tf_part = part;
    }
    bytes += isn_codec_encode(values, n, enc + bytes);
    if (fwrite(enc, 1, bytes, im->payload) != bytes) return fail(im, "cannot write the temporary postings: %s", strerror(errno));
    im->payload_bytes += bytes;
    if (meta.max_tf_part > im->list_max) im->list_max = meta.max_tf_part;
    im->prev_last = meta.last_doc;
    im->in_block = 0;
    if (im->list_blocks++ == 0) {
        im->first_meta = meta;
        return 0;
    }
    if (im->list_blocks == 2 && fwrite(&im->first_meta, sizeof meta, 1, im->block_meta) != 1)
        return fail(im, "cannot write the temporary block metadata: %s", strerror(errno));
    if (fwrite(&meta, sizeof meta, 1, im->block_meta) != 1)
        return fail(im, "cannot write the temporary block metadata: %s", strerror(errno));
    im->block_meta_bytes += (im->list_blocks == 2 ? 2 : 1) * sizeof meta;
    return 0;
}

static int add_posting(importer *im, const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    uint64_t gap = 0, tf = 0;
    while (p < end) {
        uint64_t tag, v;
        size_t n = ciff_varint_get(p, end, &tag);
        if (n == 0) return fail(im, "posting %llu is malformed", (unsigned long long)im->list_postings + 1);
        p += n;
        if ((tag & 7) != CIFF_WIRE_VARINT || (tag >> 3) == 0 || (tag >> 3) > 2)
            return fail(im, "posting %llu has field %llu of wire type %llu (a posting holds docid = 1 and tf = 2, varints)",
                        (unsigned long long)im->list_postings + 1, (unsigned long long)(tag >> 3), (unsigned long long)(tag & 7));
        if ((n = ciff_varint_get(p, end, &v)) == 0)
            return fail(im, "posting %llu is malformed", (unsigned long long)im->list_postings + 1);
        p += n;
        if (tag >> 3 == 1) gap = v;
        else tf = v;
    }
    uint64_t k = im->list_postings + 1;
    if (ciff_as_int64(gap) < 0 || ciff_as_int64(tf) < 0 || gap > INT32_MAX || tf > INT32_MAX)
        return fail(im, "posting %llu has docid %lld and tf %lld, out of int32 range or negative", (unsigned long long)k,
                    (long long)ciff_as_int64(gap), (long long)ciff_as_int64(tf));
    if (tf == 0) return fail(im, "posting %llu has tf 0", (unsigned long long)k);
    if (im->list_postings > 0 && gap == 0)
        return fail(im, "posting %llu has doc id gap 0: doc ids must increase (d-gaps: the first posting holds the doc id, "
                        "later ones the gap to the one before)", (unsigned long long)k);
    uint64_t doc = im->list_postings == 0 ? gap : im->last_doc + gap;
    if (doc >= im->num_docs)
        return fail(im, "posting %llu is doc %llu, but the file has %u documents (ids 0..%u)", (unsigned long long)k,
                    (unsigned long long)doc, im->num_docs, im->num_docs - 1);
    im->last_doc = doc;
    im->list_postings++;
    im->list_cf += tf;
    if (im->scanning) {
        if (tf > im->max_tfs[doc]) im->max_tfs[doc] = (uint32_t)tf;
        return 0;
    }
    if (im->new_of_old) {
        if (im->gathered_len == im->gathered_cap) {
            uint64_t cap = im->gathered_cap ? im->gathered_cap * 2 : 1024;
            uint64_t *g = realloc(im->gathered, cap * sizeof *g);
            if (!g) return oom(im);
            im->gathered = g;
            im->gathered_cap = cap;
        }
        im->gathered[im->gathered_len++] = (uint64_t)im->new_of_old[doc] << 32 | tf;
        return 0;
    }
    im->docs[im->in_block] = (uint32_t)doc;
    im->tfs[im->in_block] = (uint32_t)tf;
    if (++im->in_block == ISN_BLOCK_SIZE) return flush_block(im);
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The gathered list in new doc order, in blocks. */
static int put_gathered(importer *im) {
    qsort(im->gathered, im->gathered_len, sizeof *im->gathered, cmp_u64);
    for (uint64_t i = 0; i < im->gathered_len; i++) {
        im->docs[im->in_block] = (uint32_t)(im->gathered[i] >> 32);
        im->tfs[im->in_block] = (uint32_t)im->gathered[i];
        if (++im->in_block == ISN_BLOCK_SIZE && flush_block(im)) return -1;
    }
    im->gathered_len = 0;
    return 0;
}

static int skip_field(importer *im, uint64_t tag, uint64_t end) {
    uint64_t v;
    switch (tag & 7) {
    case CIFF_WIRE_VARINT:
        if (!ciff_stream_varint(&im->in, &v)) return fail(im, "field %llu: malformed varint", (unsigned long long)(tag >> 3));
        return 0;
    case CIFF_WIRE_FIXED64: v = 8; break;
    case CIFF_WIRE_FIXED32: v = 4; break;
    case CIFF_WIRE_LENGTH:
        if (!ciff_stream_varint(&im->in, &v)) return fail(im, "field %llu: malformed length", (unsigned long long)(tag >> 3));
        break;
    default:
        return fail(im, "field %llu has wire type %llu, which CIFF does not use", (unsigned long long)(tag >> 3),
                    (unsigned long long)(tag & 7));
    }
    if (v > end - im->in.offset) return fail(im, "field %llu runs past the end of the message", (unsigned long long)(tag >> 3));
    if (!ciff_stream_seek(&im->in, im->in.offset + v)) return fail(im, "cannot seek: %s", strerror(errno));
    return 0;
}

static int read_list(importer *im, uint32_t index) {
    uint64_t end;
    if (begin_message(im, 2 + (uint64_t)index, "postings list", &end)) return -1;
    im->term_len = 0;
    im->in_block = im->list_blocks = 0;
    im->list_postings = im->list_cf = im->last_doc = 0;
    im->prev_last = UINT32_MAX;
    im->list_max = 0.0f;
    int64_t df = 0, cf = 0;
    uint8_t posting[MAX_POSTING_BYTES];
    while (im->in.offset < end) {
        uint64_t tag, v;
        if (!ciff_stream_varint(&im->in, &tag) || im->in.offset > end) return fail(im, "a field tag is malformed or runs past the message");
        uint64_t field = tag >> 3, wire = tag & 7;
        bool number = field == 2 || field == 3;
        if ((field == 1 || field == 4) && wire != CIFF_WIRE_LENGTH)
            return fail(im, "field %llu has wire type %llu, expected 2 (length-delimited)", (unsigned long long)field, (unsigned long long)wire);
        if (number && wire != CIFF_WIRE_VARINT)
            return fail(im, "field %llu has wire type %llu, expected 0 (varint)", (unsigned long long)field, (unsigned long long)wire);
        if (field < 1 || field > 4) {
            if (skip_field(im, tag, end)) return -1;
            continue;
        }
        if (!ciff_stream_varint(&im->in, &v) || im->in.offset > end) return fail(im, "field %llu is malformed", (unsigned long long)field);
        if (number) {
            *(field == 2 ? &df : &cf) = ciff_as_int64(v);
            continue;
        }
        if (v > end - im->in.offset) return fail(im, "field %llu runs past the end of the message", (unsigned long long)field);
        if (field == 1) {
            if (v == 0 || v > ISN_MAX_TERM_BYTES) return fail(im, "a term of %llu bytes (1 to %d allowed)", (unsigned long long)v, ISN_MAX_TERM_BYTES);
            if (!ciff_stream_bytes(&im->in, im->term, (size_t)v)) return fail(im, "cannot read the term");
            im->term_len = (size_t)v;
            im->term[v] = '\0';
            im->has_term = memchr(im->term, 0, im->term_len) == NULL;
            if (!im->has_term) return fail(im, "the term holds a NUL byte");
            continue;
        }
        if (v > MAX_POSTING_BYTES)
            return fail(im, "posting %llu is %llu bytes (a posting is two int32 fields)", (unsigned long long)im->list_postings + 1,
                        (unsigned long long)v);
        if (!ciff_stream_bytes(&im->in, posting, (size_t)v)) return fail(im, "cannot read posting %llu", (unsigned long long)im->list_postings + 1);
        if (add_posting(im, posting, (size_t)v)) return -1;
    }
    if (im->in.offset != end) return fail(im, "the last field runs past the end of the message");
    if (im->term_len == 0) return fail(im, "no term");
    if (im->list_postings == 0) return fail(im, "no postings");
    if (df != (int64_t)im->list_postings) return fail(im, "df %lld, but the list holds %llu postings", (long long)df, (unsigned long long)im->list_postings);
    if (cf != (int64_t)im->list_cf) return fail(im, "cf %lld, but the postings' tf sum to %llu", (long long)cf, (unsigned long long)im->list_cf);
    if (im->scanning) return 0;
    if (im->new_of_old && put_gathered(im)) return -1;
    if (im->in_block && flush_block(im)) return -1;
    if (index > 0) {
        int c = memcmp(im->prev_term, im->term, im->prev_term_len < im->term_len ? im->prev_term_len : im->term_len);
        if (c > 0 || (c == 0 && im->prev_term_len >= im->term_len))
            return fail(im, "the term does not come after \"%.40s\" in byte order (ISN needs the lists sorted by term, as "
                            "Anserini, PISA and Terrier write them)", im->prev_term);
    }
    isn_term_entry entry = {.df = (uint32_t)im->list_postings,
                            .cf = im->list_cf > UINT32_MAX ? UINT32_MAX : (uint32_t)im->list_cf,
                            .max_tf_part = im->list_max};
    if (put_term_entry(&im->terms, &entry) ||
        put_lexicon_term(&im->lex_index, &im->lex_data, index, im->term, im->term_len, im->prev_term, im->prev_term_len))
        return oom(im);
    memcpy(im->prev_term, im->term, im->term_len);
    im->prev_term_len = im->term_len;
    if (im->term_len > im->longest_term) im->longest_term = (uint32_t)im->term_len;
    im->num_blocks += im->list_blocks;
    im->num_postings += im->list_postings;
    if (im->num_blocks > UINT32_MAX) return fail(im, "more than 2^32 posting blocks: too large for one partition");
    return 0;
}

/* A temporary file in the output folder (not /tmp, which may be memory): unlinked at once. */
static FILE *temp_file(importer *im, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.ciff-import.XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        im->kind = NULL;
        fail(im, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        return NULL;
    }
    unlink(path);
    FILE *f = fdopen(fd, "w+b");
    if (!f) close(fd);
    return f;
}

static int write_index(importer *im, const char *out_dir, isn_ciff_summary *summary) {
    isn_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.built_unix_seconds = isn_index_build_time();
    meta.num_docs = im->num_docs;
    meta.num_terms = im->num_lists;
    meta.num_fields = 1;
    meta.flags = ISN_META_EXTERNAL_TERMS | (im->options.analyzer.pretokenized ? ISN_META_PRETOKENIZED : 0) |
                 (im->score_bounds ? ISN_META_SCORE_BOUNDS : 0);
    meta.num_postings = im->num_postings;
    meta.num_blocks = im->num_blocks;
    meta.total_doc_len = meta.total_field_len[0] = im->total_doc_len;
    meta.k1 = im->options.bm25.k1;
    meta.b = im->options.bm25.b;
    meta.analyzer_stem = !im->options.analyzer.pretokenized && im->options.analyzer.stem;
    meta.analyzer_stopwords = !im->options.analyzer.pretokenized && im->options.analyzer.stopwords;
    /* Long enough for every imported term (the reader checks terms against it), and never below the
     * analyzer's own default cut. */
    uint32_t max_token = im->options.analyzer.max_token_bytes ? im->options.analyzer.max_token_bytes : DEFAULT_MAX_TOKEN_BYTES;
    meta.analyzer_max_token_bytes = im->longest_term > max_token ? im->longest_term : max_token;
    meta.num_lex_blocks = (im->num_lists + ISN_LEXICON_BLOCK - 1) / ISN_LEXICON_BLOCK;
    snprintf(meta.fields[0], sizeof meta.fields[0], "body");
    uint64_t lex_end = im->lex_data.len;
    if (buf_put(&im->lex_index, &lex_end, sizeof lex_end)) return oom(im);
    static const uint8_t slack[ISN_CODEC_READ_SLACK];
    if (fflush(im->payload) != 0 || fflush(im->block_meta) != 0)
        return fail(im, "cannot write the temporary files: %s", strerror(errno));

    isn_piece pieces[SEC_COUNT], postings[2];
    isn_section_pieces lists[SEC_COUNT];
    for (int s = 0; s < SEC_COUNT; s++) {
        pieces[s] = (isn_piece){.data = NULL, .bytes = 0};
        lists[s] = (isn_section_pieces){&pieces[s], 1};
    }
    pieces[SEC_META] = (isn_piece){.data = &meta, .bytes = sizeof meta};
    pieces[SEC_DOC_LENS] = (isn_piece){.data = im->doc_lens.data, .bytes = im->doc_lens.len};
    pieces[SEC_DOCID_TEXT] = (isn_piece){.data = im->doc_ids.data, .bytes = im->doc_ids.len};
    pieces[SEC_LEX_INDEX] = (isn_piece){.data = im->lex_index.data, .bytes = im->lex_index.len};
    pieces[SEC_LEX_DATA] = (isn_piece){.data = im->lex_data.data, .bytes = im->lex_data.len};
    pieces[SEC_TERMS] = (isn_piece){.data = im->terms.data, .bytes = im->terms.len};
    pieces[SEC_BLOCK_META] = (isn_piece){.bytes = im->block_meta_bytes, .file = im->block_meta};
    if (im->score_bounds) pieces[SEC_SCORE_BOUNDS] = (isn_piece){.data = im->score_bounds, .bytes = (uint64_t)im->num_docs * sizeof(float)};
    postings[0] = (isn_piece){.bytes = im->payload_bytes, .file = im->payload};
    postings[1] = (isn_piece){.data = slack, .bytes = sizeof slack};
    lists[SEC_POSTINGS] = (isn_section_pieces){postings, 2};
    uint64_t bytes[SEC_COUNT], file_bytes;
    char inner[ISN_ERR_LEN];
    im->kind = NULL;
    if (isn_index_file_write(out_dir, ISN_FORMAT_VERSION, lists, bytes, &file_bytes, inner, sizeof inner) != 0)
        return fail(im, "%s", inner);
    if (summary) summary->index_bytes = file_bytes;
    return 0;
}

int isn_ciff_import(const char *ciff_path, const char *out_dir, const isn_ciff_import_options *options,
                    isn_ciff_summary *summary, char *err, size_t err_len) {
    double start = isn_now_seconds();
    importer *im = calloc(1, sizeof *im);
    uint8_t *record = malloc(MAX_RECORD_BYTES);
    if (!im || !record) {
        free(im);
        free(record);
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    im->path = ciff_path;
    im->err = err;
    im->err_len = err_len;
    err[0] = '\0';
    if (options) im->options = *options;
    else isn_ciff_import_options_default(&im->options);
    im->k1_plus_1 = im->options.bm25.k1 + 1.0f;
    im->in.fd = -1;
    int rc = -1;
    struct stat st;
    if ((im->in.fd = isn_open_regular(ciff_path)) < 0) {
        fail(im, "cannot open: %s", isn_open_regular_strerror(errno));
        goto done;
    }
    if (fstat(im->in.fd, &st) != 0 || !(im->in.buf = malloc(CIFF_STREAM_BUFFER_BYTES))) {
        fail(im, "cannot read: %s", strerror(errno));
        goto done;
    }
    im->in.file_bytes = (uint64_t)st.st_size;
    if (im->options.order != ISN_ORDER_INPUT && im->options.order != ISN_ORDER_GLOBAL) {
        fail(im, "an imported index is in the file's order or in global order");
        goto done;
    }
    if (read_header(im, record)) goto done;
    if (im->options.order == ISN_ORDER_GLOBAL &&
        (!(im->id_offs = calloc((size_t)im->num_docs + 1, sizeof *im->id_offs)) ||
         !(im->max_tfs = calloc(im->num_docs ? im->num_docs : 1, sizeof *im->max_tfs)))) {
        oom(im);
        goto done;
    }
    if (read_documents(im, record)) goto done;
    if (im->max_tfs) {
        im->scanning = true;
        if (!ciff_stream_seek(&im->in, im->lists_at)) {
            fail(im, "cannot seek: %s", strerror(errno));
            goto done;
        }
        for (uint32_t i = 0; i < im->num_lists; i++)
            if (read_list(im, i) != 0) goto done;
        im->scanning = false;
        if (order_documents(im) != 0) goto done;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        im->kind = NULL;
        fail(im, "cannot create directory %s: %s", out_dir, strerror(errno));
        goto done;
    }
    if (!(im->payload = temp_file(im, out_dir)) || !(im->block_meta = temp_file(im, out_dir))) goto done;
    if (!ciff_stream_seek(&im->in, im->lists_at)) {
        fail(im, "cannot seek: %s", strerror(errno));
        goto done;
    }
    for (uint32_t i = 0; i < im->num_lists; i++)
        if (read_list(im, i) != 0) goto done;
    if (write_index(im, out_dir, summary) != 0) goto done;
    if (summary) {
        summary->postings_lists = im->num_lists;
        summary->docs = im->num_docs;
        summary->postings = im->num_postings;
        summary->ciff_bytes = im->in.file_bytes;
        summary->seconds = isn_now_seconds() - start;
        memcpy(summary->description, im->description, sizeof summary->description);
    }
    rc = 0;
done:
    if (im->in.fd >= 0) close(im->in.fd);
    if (im->payload) fclose(im->payload);
    if (im->block_meta) fclose(im->block_meta);
    free(im->in.buf);
    free(im->norms);
    free(im->doc_lens.data);
    free(im->doc_ids.data);
    free(im->terms.data);
    free(im->lex_index.data);
    free(im->lex_data.data);
    free(im->doc_lens_read);
    free(im->id_offs);
    free(im->id_text.data);
    free(im->max_tfs);
    free(im->new_of_old);
    free(im->score_bounds);
    free(im->gathered);
    free(im);
    free(record);
    return rc;
}
