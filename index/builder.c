/* In-memory inversion: documents in, per-term posting lists (and positions) out. */
#include <float.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/analyzer_internal.h"
#include "index/builder.h"
#include "index/format.h"

void isn_build_options_default(isn_build_options *o) {
    *o = (isn_build_options){
        .format = ISN_FORMAT_JSONL,
        .num_fields = 2,
        .fields = {"title", "body"},
        .id_field = "id",
        .bm25 = {.k1 = ISN_BM25_DEFAULT_K1, .b = ISN_BM25_DEFAULT_B},
        .positions = true,
        .order = ISN_ORDER_INPUT,
        .partitions = 1,
        .split = ISN_SPLIT_HASH,
        .prior_weight = 1.0f,
    };
    isn_analyzer_config_default(&o->analyzer);
}

/* The indexed field of that name, or -1. */
static int field_index(const isn_build_options *o, const char *name) {
    for (uint32_t f = 0; f < o->num_fields; f++)
        if (strncmp(o->fields[f], name, ISN_FIELD_NAME_MAX) == 0) return (int)f;
    return -1;
}

int isn_build_options_check(const isn_build_options *o, char *err, size_t err_len) {
    if (o->num_fields == 0 || o->num_fields > ISN_MAX_FIELDS)
        return isn_error(err, err_len, "%u fields to index (1..%d allowed)", o->num_fields, ISN_MAX_FIELDS);
    if (o->num_stored > o->num_fields)
        return isn_error(err, err_len, "%u stored fields of %u indexed", o->num_stored, o->num_fields);
    for (uint32_t i = 0; i < o->num_stored; i++) {
        if (field_index(o, o->stored[i]) < 0) {
            char names[ISN_MAX_FIELDS * (ISN_FIELD_NAME_MAX + 2)] = "";
            for (uint32_t f = 0; f < o->num_fields; f++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%.*s", f ? ", " : "", ISN_FIELD_NAME_MAX,
                         o->fields[f]);
            return isn_error(err, err_len, "stored field \"%.*s\" is not an indexed field (indexed: %s)", ISN_FIELD_NAME_MAX,
                             o->stored[i], names);
        }
        for (uint32_t j = 0; j < i; j++)
            if (strncmp(o->stored[i], o->stored[j], ISN_FIELD_NAME_MAX) == 0)
                return isn_error(err, err_len, "stored field \"%.*s\" is named twice", ISN_FIELD_NAME_MAX, o->stored[i]);
    }
    if (!(o->prior_weight >= 0.0f && o->prior_weight <= FLT_MAX))
        return isn_error(err, err_len, "prior weight %g: it must be a finite number >= 0", (double)o->prior_weight);
    return 0;
}

isn_builder *isn_builder_new(const isn_build_options *options) {
    char err[ISN_ERR_LEN];
    if (isn_build_options_check(options, err, sizeof err) != 0) return NULL;
    isn_builder *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->options = *options;
    /* Stored in the order of the indexed fields, whatever order they were named in. */
    for (uint32_t f = 0, slot = 0; f < options->num_fields; f++)
        for (uint32_t i = 0; i < options->num_stored; i++)
            if (field_index(options, options->stored[i]) == (int)f) b->stored_slots[slot++] = f;
    if (b->options.analyzer.max_token_bytes == 0 || b->options.analyzer.max_token_bytes > ISN_MAX_TERM_BYTES)
        b->options.analyzer.max_token_bytes = ISN_MAX_TERM_BYTES;
    b->analyzer = isn_analyzer_new(&b->options.analyzer);
    b->short_term_ids = calloc(SHORT_TERM_TWO_BYTES + 256, sizeof *b->short_term_ids);
    if (!b->analyzer || !b->short_term_ids || isn_strtab_init(&b->terms, 1 << 16) != 0 ||
        isn_strtab_init(&b->ids, 1 << 16) != 0) {
        isn_builder_free(b);
        return NULL;
    }
    analyzer_cache_on_huge_pages(b->analyzer);
    return b;
}

void isn_builder_free(isn_builder *b) {
    if (!b) return;
    for (uint32_t i = 0; i < isn_strtab_count(&b->terms); i++) {
        free(b->lists[i].postings);
        free(b->lists[i].positions);
    }
    free(b->lists);
    free(b->doc_terms);
    free(b->short_term_ids);
    free(b->doc_positions);
    isn_strtab_free(&b->terms);
    isn_strtab_free(&b->ids);
    free(b->field_lens);
    free(b->static_scores);
    free(b->max_tfs);
    buffer_free(&b->stored_text);
    free(b->stored_offs);
    if (b->analyzer) isn_analyzer_free(b->analyzer);
    free(b);
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint32_t c = *cap ? *cap : 4;
    while (c < need) c = c > UINT32_MAX / 2 ? UINT32_MAX : c * 2;
    void *n = realloc(*p, (size_t)c * elem);
    if (!n) return -1;
    *p = n;
    *cap = c;
    return 0;
}

static void add_term(void *ctx, const char *term, size_t len, uint32_t position) {
    isn_builder *b = ctx;
    bool added = false;
    /* A word met before maps to its term id in the analyzer's stem cache, and a term of one or two
     * bytes (a tenth of the tokens; the cache does not hold them) in short_term_ids: no term table
     * probe, which on a table of this size is a cache miss. */
    uint32_t *memo = analyzer_emitted_memo(b->analyzer);
    if (!memo && len == 2) memo = &b->short_term_ids[(uint8_t)term[0] | (uint32_t)(uint8_t)term[1] << 8];
    else if (!memo && len == 1) memo = &b->short_term_ids[SHORT_TERM_TWO_BYTES + (uint8_t)term[0]];
    uint32_t t;
    if (memo && *memo) {
        t = *memo - 1;
    } else {
        t = isn_strtab_intern(&b->terms, term, len, &added);
        if (t == UINT32_MAX) {
            b->oom = 1;
            return;
        }
        if (memo) *memo = t + 1;
    }
    if (added) {
        if (grow((void **)&b->lists, &b->lists_cap, t + 1, sizeof *b->lists) != 0) {
            b->oom = 1;
            return;
        }
        memset(&b->lists[t], 0, sizeof b->lists[t]);
    }
    if (b->doc_len == b->doc_cap) {
        uint32_t cap = b->doc_cap;
        if (grow((void **)&b->doc_terms, &cap, b->doc_len + 1, sizeof *b->doc_terms) != 0 ||
            (b->options.positions &&
             grow((void **)&b->doc_positions, &b->doc_cap, b->doc_len + 1, sizeof *b->doc_positions) != 0)) {
            b->oom = 1;
            return;
        }
        b->doc_cap = cap;
    }
    b->doc_terms[b->doc_len] = t;
    if (b->options.positions) {
        uint32_t pos = position > ISN_BUILD_POS_MAX ? ISN_BUILD_POS_MAX : position;
        b->doc_positions[b->doc_len] = b->cur_field << ISN_BUILD_POS_BITS | pos;
    }
    b->doc_len++;
    b->cur_field_len++;
    b->tokens++;
}

static int append_token(isn_builder *b, uint32_t t, uint32_t position_code) {
    isn_build_list *l = &b->lists[t];
    if (l->last_doc != b->cur_doc + 1) {
        uint32_t cap = l->postings_cap;
        if (grow((void **)&l->postings, &l->postings_cap, 2 * (l->num_postings + 1), sizeof *l->postings) != 0) return -1;
        b->list_bytes += (uint64_t)(l->postings_cap - cap) * sizeof *l->postings;
        l->postings[2 * l->num_postings] = b->cur_doc;
        l->postings[2 * l->num_postings + 1] = 0;
        l->num_postings++;
        l->last_doc = b->cur_doc + 1;
    }
    uint32_t tf = ++l->postings[2 * l->num_postings - 1];
    if (tf > b->doc_max_tf) b->doc_max_tf = tf;
    if (b->options.positions) {
        uint32_t cap = l->positions_cap;
        if (grow((void **)&l->positions, &l->positions_cap, l->num_positions + 1, sizeof *l->positions) != 0) return -1;
        b->list_bytes += (uint64_t)(l->positions_cap - cap) * sizeof *l->positions;
        l->positions[l->num_positions++] = position_code;
    }
    return 0;
}

/* Appends the document's tokens to their posting lists, in token order as if each went on arrival.
 * Deferred to the end of the document so that the list heads, and then the list tails, of all its
 * terms are fetched from memory at once: one token at a time, each of these cache misses waited for
 * the one before. */
static int append_document(isn_builder *b) {
    const uint32_t *terms = b->doc_terms;
    uint32_t n = b->doc_len;
    b->doc_len = 0;
    b->doc_max_tf = 0;
    for (uint32_t i = 0; i < n; i++) __builtin_prefetch(&b->lists[terms[i]], 1);
    for (uint32_t i = 0; i < n; i++) {
        const isn_build_list *l = &b->lists[terms[i]];
        if (l->num_postings) __builtin_prefetch(&l->postings[2 * l->num_postings - 1], 1);
    }
    for (uint32_t i = 0; i < n; i++)
        if (append_token(b, terms[i], b->options.positions ? b->doc_positions[i] : 0) != 0) return -1;
    return 0;
}

static bool blank(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

const char *isn_builder_record_error(const isn_build_options *o, const char *external_id, const char *const *fields,
                                     const size_t *field_lens) {
    if (!external_id || !external_id[0]) return "missing or empty id";
    for (uint32_t f = 0; f < o->num_fields; f++)
        if (fields[f] && !blank(fields[f], field_lens[f])) return NULL;
    return "empty text in every indexed field";
}

/* Analyzes the document b->cur_doc into the posting lists; lens_out[f]: tokens of field f. 0, or -1 out of memory. */
static int analyze_document(isn_builder *b, const char *const *fields, const size_t *field_lens, uint32_t *lens_out) {
    for (uint32_t f = 0; f < b->options.num_fields; f++) {
        b->cur_field = f;
        b->cur_field_len = 0;
        if (fields[f] && field_lens[f]) isn_analyze(b->analyzer, fields[f], field_lens[f], add_term, b);
        lens_out[f] = b->cur_field_len;
    }
    return b->oom || append_document(b) != 0 ? -1 : 0;
}

int isn_builder_add(isn_builder *b, const char *external_id, const char *const *fields, const size_t *field_lens,
                    float static_score, char *err, size_t err_len) {
    const char *bad = isn_builder_record_error(&b->options, external_id, fields, field_lens);
    if (bad) {
        snprintf(err, err_len, "%s", bad);
        return -1;
    }
    size_t id_len = strlen(external_id);
    if (b->num_docs == UINT32_MAX - 1) {
        snprintf(err, err_len, "too many documents for one partition (max %u)", UINT32_MAX - 1);
        return -1;
    }
    /* One probe of the id table both finds a duplicate and adds a new id (as the next document's). */
    bool added;
    if (isn_strtab_intern(&b->ids, external_id, id_len, &added) == UINT32_MAX) goto oom;
    if (!added) {
        snprintf(err, err_len, "duplicate id \"%.*s\"", (int)(id_len > 80 ? 80 : id_len), external_id);
        return -1;
    }
    uint32_t nf = b->options.num_fields;
    if (b->num_docs == b->docs_cap) {
        uint32_t cap = b->docs_cap ? b->docs_cap * 2 : 1024;
        uint32_t *lens = realloc(b->field_lens, (size_t)cap * nf * sizeof *lens);
        if (!lens) goto oom;
        b->field_lens = lens;
        float *scores = realloc(b->static_scores, (size_t)cap * sizeof *scores);
        if (!scores) goto oom;
        b->static_scores = scores;
        uint32_t *max_tfs = realloc(b->max_tfs, (size_t)cap * sizeof *max_tfs);
        if (!max_tfs) goto oom;
        b->max_tfs = max_tfs;
        b->docs_cap = cap;
    }

    b->cur_doc = b->num_docs;
    if (analyze_document(b, fields, field_lens, b->field_lens + (size_t)b->cur_doc * nf) != 0 ||
        isn_builder_store(b, fields, field_lens) != 0)
        goto oom;
    b->static_scores[b->cur_doc] = static_score;
    b->max_tfs[b->cur_doc] = b->doc_max_tf;
    b->num_docs++;
    return 0;
oom:
    b->doc_len = 0;
    snprintf(err, err_len, "out of memory while indexing document %u", b->num_docs);
    b->oom = 1;
    return -1;
}

int isn_builder_invert(isn_builder *b, uint32_t doc, const char *const *fields, const size_t *field_lens,
                       uint32_t *lens_out) {
    b->cur_doc = doc;
    if (analyze_document(b, fields, field_lens, lens_out) != 0) {
        b->doc_len = 0;
        b->oom = 1;
        return -1;
    }
    return 0;
}

uint64_t isn_builder_run_bytes(const isn_builder *b) {
    const isn_strtab *t = &b->terms;
    return b->list_bytes + (uint64_t)b->lists_cap * sizeof *b->lists + isn_string_store_footprint(&t->strings) +
           (uint64_t)t->num_slots * sizeof *t->slots + (uint64_t)b->doc_cap * 8;
}

int isn_builder_reset_run(isn_builder *b) {
    uint32_t expected = isn_strtab_count(&b->terms); /* the next run's vocabulary is like this one's: no regrowing */
    for (uint32_t i = 0; i < isn_strtab_count(&b->terms); i++) {
        free(b->lists[i].postings);
        free(b->lists[i].positions);
    }
    free(b->lists);
    b->lists = NULL;
    b->lists_cap = 0;
    b->list_bytes = 0;
    isn_strtab_free(&b->terms);
    memset(b->short_term_ids, 0, (SHORT_TERM_TWO_BYTES + 256) * sizeof *b->short_term_ids);
    analyzer_clear_memos(b->analyzer);
    return isn_strtab_init(&b->terms, expected > (1u << 12) ? expected : 1u << 12);
}
