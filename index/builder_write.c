/* Writes the builder's inverted lists as one index file (format.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "index/builder.h"
#include "index/file_writer.h"
#include "index/format.h"
#include "index/section_buf.h"

/* Builder-wide state of one write. */
typedef struct {
    const isn_builder *b;
    uint32_t *new_of_old;
    list_encoder enc;
    out_buf terms, lex_index, lex_data;
    /* per-list scratch */
    uint32_t *sorted; /* (new doc, tf, position start) triples */
    uint32_t sorted_cap;
} writer;

static const isn_builder *sort_ctx_builder;

static int cmp_term_text(const void *a, const void *b) {
    size_t la, lb;
    const char *sa = isn_strtab_get(&sort_ctx_builder->terms, *(const uint32_t *)a, &la);
    const char *sb = isn_strtab_get(&sort_ctx_builder->terms, *(const uint32_t *)b, &lb);
    int c = memcmp(sa, sb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static int cmp_doc_by_static(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    float sx = sort_ctx_builder->static_scores[x], sy = sort_ctx_builder->static_scores[y];
    if (sx != sy) return sx > sy ? -1 : 1;
    return (x > y) - (x < y);
}

static int cmp_doc_by_id(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx, ly;
    const char *ix = isn_strtab_get(&sort_ctx_builder->ids, x, &lx);
    const char *iy = isn_strtab_get(&sort_ctx_builder->ids, y, &ly);
    int c = memcmp(ix, iy, lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

static int cmp_triple(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Encodes one term's list: blocks into postings, metadata, positions. */
static int write_list(writer *w, const isn_build_list *l, isn_term_entry *entry) {
    uint32_t n = l->num_postings;
    if (w->sorted_cap < 3 * n) {
        uint32_t *s = realloc(w->sorted, (size_t)3 * n * sizeof *s);
        if (!s) return -1;
        w->sorted = s;
        w->sorted_cap = 3 * n;
    }
    uint32_t pos_start = 0;
    for (uint32_t i = 0; i < n; i++) {
        w->sorted[3 * i] = w->new_of_old ? w->new_of_old[l->postings[2 * i]] : l->postings[2 * i];
        w->sorted[3 * i + 1] = l->postings[2 * i + 1];
        w->sorted[3 * i + 2] = pos_start;
        pos_start += l->postings[2 * i + 1];
    }
    if (w->new_of_old) qsort(w->sorted, n, 3 * sizeof(uint32_t), cmp_triple);
    return list_encoder_add(&w->enc, w->sorted, n, l->positions, entry);
}

static int write_file(const char *dir, const isn_meta *meta, const out_buf *sections, isn_build_summary *summary,
                      char *err, size_t err_len) {
    isn_piece pieces[SEC_COUNT];
    isn_section_pieces lists[SEC_COUNT];
    for (int s = 0; s < SEC_COUNT; s++) {
        pieces[s] = s == SEC_META ? (isn_piece){.data = meta, .bytes = sizeof *meta}
                                : (isn_piece){.data = sections[s].data, .bytes = sections[s].len};
        lists[s] = (isn_section_pieces){&pieces[s], 1};
    }
    uint64_t bytes[SEC_COUNT], file_bytes;
    if (isn_index_file_write(dir, ISN_FORMAT_VERSION, lists, bytes, &file_bytes, err, err_len) != 0) return -1;
    if (summary) isn_build_summary_set_bytes(summary, bytes, file_bytes);
    return 0;
}

/* GS(d) of every document (input order) and new_of_old by it. */
static uint32_t *global_permutation(const isn_builder *b) {
    uint32_t n = b->num_docs, nf = b->options.num_fields;
    float *gs = malloc((size_t)(n ? n : 1) * sizeof *gs);
    if (!gs) return NULL;
    uint64_t total = 0;
    for (size_t i = 0; i < (size_t)n * nf; i++) total += b->field_lens[i];
    float avg = isn_avg_len(total, n);
    bool prior = b->options.static_score_field[0] != 0;
    for (uint32_t d = 0; d < n; d++) {
        uint32_t dl = 0;
        for (uint32_t f = 0; f < nf; f++) dl += b->field_lens[(size_t)d * nf + f];
        gs[d] = global_best_part(&b->options.bm25, b->max_tfs[d], dl, avg);
        if (prior) gs[d] += b->options.prior_weight * b->static_scores[d];
    }
    uint32_t *new_of_old = global_order_permutation(gs, n);
    free(gs);
    return new_of_old;
}

static uint32_t *doc_permutation(const isn_builder *b) {
    if (b->options.order == ISN_ORDER_INPUT) return NULL;
    if (b->options.order == ISN_ORDER_BP) return isn_bp_order(b, 0);
    if (b->options.order == ISN_ORDER_GLOBAL) return global_permutation(b);
    uint32_t n = b->num_docs;
    uint32_t *old_of_new = malloc((size_t)(n ? n : 1) * sizeof *old_of_new);
    uint32_t *new_of_old = malloc((size_t)(n ? n : 1) * sizeof *new_of_old);
    if (!old_of_new || !new_of_old) {
        free(old_of_new);
        free(new_of_old);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) old_of_new[i] = i;
    sort_ctx_builder = b;
    qsort(old_of_new, n, sizeof *old_of_new, b->options.order == ISN_ORDER_STATIC ? cmp_doc_by_static : cmp_doc_by_id);
    for (uint32_t i = 0; i < n; i++) new_of_old[old_of_new[i]] = i;
    free(old_of_new);
    return new_of_old;
}

int isn_builder_write(isn_builder *b, const char *out_dir, isn_build_summary *summary, char *err, size_t err_len) {
    double start = isn_now_seconds();
    if (b->oom) {
        snprintf(err, err_len, "the builder ran out of memory earlier; nothing written");
        return -1;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "cannot create directory %s: %s", out_dir, strerror(errno));
        return -1;
    }
    uint32_t nd = b->num_docs, nf = b->options.num_fields, nt = isn_strtab_count(&b->terms);
    writer w;
    memset(&w, 0, sizeof w);
    w.b = b;
    w.enc.k1_plus_1 = b->options.bm25.k1 + 1.0f;
    w.enc.num_fields = nf;
    w.enc.with_positions = b->options.positions;
    w.new_of_old = doc_permutation(b);
    int rc = -1;
    if (b->options.order != ISN_ORDER_INPUT && !w.new_of_old && nd) goto oom;

    isn_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.num_docs = nd;
    meta.num_terms = nt;
    meta.num_fields = nf;
    meta.built_unix_seconds = isn_index_build_time();
    meta.flags = (b->options.positions ? ISN_META_HAS_POSITIONS : 0) |
                 (b->options.static_score_field[0] ? ISN_META_HAS_STATIC : 0) |
                 (b->options.order == ISN_ORDER_GLOBAL ? ISN_META_SCORE_BOUNDS : 0);
    meta.k1 = b->options.bm25.k1;
    meta.b = b->options.bm25.b;
    meta.analyzer_stem = b->options.analyzer.stem;
    meta.analyzer_stopwords = b->options.analyzer.stopwords;
    meta.analyzer_max_token_bytes = b->options.analyzer.max_token_bytes;
    meta.num_lex_blocks = (nt + ISN_LEXICON_BLOCK - 1) / ISN_LEXICON_BLOCK;
    for (uint32_t f = 0; f < nf; f++) memcpy(meta.fields[f], b->options.fields[f], ISN_FIELD_NAME_MAX);

    out_buf sections[SEC_COUNT];
    memset(sections, 0, sizeof sections);
    uint32_t *lens = malloc((size_t)(nd ? nd : 1) * nf * sizeof *lens);
    float *norms = malloc((size_t)(nd ? nd : 1) * sizeof *norms);
    uint32_t *term_order = malloc((size_t)(nt ? nt : 1) * sizeof *term_order);
    if (!lens || !norms || !term_order) goto oom_locals;
    uint32_t *old_of_new = malloc((size_t)(nd ? nd : 1) * sizeof *old_of_new);
    if (!old_of_new) goto oom_locals;
    for (uint32_t old = 0; old < nd; old++) old_of_new[w.new_of_old ? w.new_of_old[old] : old] = old;
    const char *prev_id = "";
    size_t prev_id_len = 0;
    for (uint32_t nw = 0; nw < nd; nw++) {
        uint32_t old = old_of_new[nw];
        uint32_t dl = 0;
        for (uint32_t f = 0; f < nf; f++) {
            uint32_t fl = b->field_lens[(size_t)old * nf + f];
            lens[(size_t)nw * nf + f] = fl;
            meta.total_field_len[f] += fl;
            dl += fl;
            uint8_t v[5];
            if (buf_put(&sections[SEC_DOC_LENS], v, (uint64_t)(isn_varint_put(v, fl) - v)) != 0) goto oom_all;
        }
        meta.total_doc_len += dl;
        size_t il;
        const char *id = isn_strtab_get(&b->ids, old, &il);
        if (put_external_id(&sections[SEC_DOCID_TEXT], id, il, prev_id, prev_id_len) != 0) goto oom_all;
        prev_id = id;
        prev_id_len = il;
        if (meta.flags & ISN_META_HAS_STATIC && buf_put(&sections[SEC_DOC_STATIC], &b->static_scores[old], sizeof(float)) != 0)
            goto oom_all;
    }
    float avg = isn_avg_len(meta.total_doc_len, nd);
    for (uint32_t nw = 0; nw < nd; nw++) {
        uint32_t dl = 0;
        for (uint32_t f = 0; f < nf; f++) dl += lens[(size_t)nw * nf + f];
        norms[nw] = isn_bm25_doc_norm(&b->options.bm25, dl, avg);
    }
    w.enc.norms = norms;
    if (meta.flags & ISN_META_SCORE_BOUNDS) {
        float *bounds = malloc((size_t)(nd ? nd : 1) * sizeof *bounds);
        if (!bounds) goto oom_all;
        for (uint32_t nw = 0; nw < nd; nw++) {
            uint32_t dl = 0;
            for (uint32_t f = 0; f < nf; f++) dl += lens[(size_t)nw * nf + f];
            bounds[nw] = global_best_part(&b->options.bm25, b->max_tfs[old_of_new[nw]], dl, avg);
        }
        global_suffix_maxima(bounds, nd);
        sections[SEC_SCORE_BOUNDS] = (out_buf){.data = (uint8_t *)bounds, .len = (uint64_t)nd * sizeof *bounds, .cap = (uint64_t)nd * sizeof *bounds};
    }

    for (uint32_t t = 0; t < nt; t++) term_order[t] = t;
    sort_ctx_builder = b;
    qsort(term_order, nt, sizeof *term_order, cmp_term_text);
    const char *prev = "";
    size_t prev_len = 0;
    for (uint32_t rank = 0; rank < nt; rank++) {
        uint32_t t = term_order[rank];
        size_t len;
        const char *s = isn_strtab_get(&b->terms, t, &len);
        isn_term_entry entry;
        if (write_list(&w, &b->lists[t], &entry) != 0 || put_term_entry(&w.terms, &entry) != 0 ||
            put_lexicon_term(&w.lex_index, &w.lex_data, rank, s, len, prev, prev_len) != 0)
            goto oom_all;
        meta.num_postings += entry.df;
        prev = s;
        prev_len = len;
    }
    uint64_t lex_end = w.lex_data.len;
    if (buf_put(&w.lex_index, &lex_end, sizeof lex_end) != 0) goto oom_all;
    static const uint8_t slack[ISN_CODEC_READ_SLACK];
    if (section_out_put(&w.enc.postings, slack, sizeof slack) != 0) goto oom_all;
    meta.num_blocks = w.enc.num_blocks;

    sections[SEC_LEX_INDEX] = w.lex_index;
    sections[SEC_LEX_DATA] = w.lex_data;
    sections[SEC_TERMS] = w.terms;
    sections[SEC_BLOCK_META] = w.enc.block_meta.buf;
    sections[SEC_POSTINGS] = w.enc.postings.buf;
    sections[SEC_POS_BLOCKS] = w.enc.pos_blocks.buf;
    sections[SEC_POSITIONS] = w.enc.positions.buf;
    void *stored;
    if (isn_builder_write_stored(b, old_of_new, &stored, &sections[SEC_STORED].len, err, err_len) != 0) {
        rc = -1;
        goto done;
    }
    sections[SEC_STORED].data = stored;
    rc = write_file(out_dir, &meta, sections, summary, err, err_len);
    if (summary) {
        summary->docs = nd;
        summary->terms = nt;
        summary->postings = meta.num_postings;
        summary->tokens = b->tokens;
        summary->seconds = isn_now_seconds() - start;
    }
    goto done;
oom_all:
    snprintf(err, err_len, "out of memory while writing the index");
    rc = -1;
done:
    free(old_of_new);
    free(sections[SEC_DOC_LENS].data);
    free(sections[SEC_DOCID_TEXT].data);
    free(sections[SEC_DOC_STATIC].data);
    free(sections[SEC_STORED].data);
    free(sections[SEC_SCORE_BOUNDS].data);
    free(w.lex_index.data);
    free(w.lex_data.data);
    free(w.terms.data);
    free(w.enc.block_meta.buf.data);
    free(w.enc.postings.buf.data);
    free(w.enc.pos_blocks.buf.data);
    free(w.enc.positions.buf.data);
    free(lens);
    free(norms);
    free(term_order);
    free(w.sorted);
    free(w.new_of_old);
    return rc;
oom_locals:
    free(lens);
    free(norms);
    free(term_order);
oom:
    free(w.new_of_old);
    snprintf(err, err_len, "out of memory while writing the index");
    return -1;
}
