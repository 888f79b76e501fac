/* --order global (issue 41): documents numbered by decreasing global score GS(d) = P(d) + w * prior(d),
 * P(d) the document's best BM25 term part, ties in input order, the same bytes on every build; and the
 * score bounds the index keeps: recomputed here from the postings they equal the suffix maxima of P, and
 * over random queries (IDF weights and arbitrary ones, repeated terms, local and global average lengths)
 * no document after an id ever scores above the bound the index gives for that id. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/format.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define DOCS 3000
#define VOCABULARY 400
#define QUERIES 300

static char tmp_root[] = "/tmp/isn-test-global-order-XXXXXX";
static char corpus_path[300];

/* Zipf-like terms, lengths from 1 to ~300 tokens, some documents repeating one term many times (large
 * tf), some exact copies of an earlier document (equal GS: ties), a prior on most documents. */
static void write_corpus(void) {
    FILE *f = fopen(corpus_path, "w");
    assert_non_null(f);
    support_rng_seed(41);
    static char bodies[DOCS][4096];
    for (uint32_t d = 0; d < DOCS; d++) {
        char *b = bodies[d];
        size_t len = 0;
        if (d > 10 && d % 17 == 0) {
            memcpy(b, bodies[d / 2], sizeof bodies[d]);
        } else {
            uint32_t n = 1 + support_rng_below(d % 5 == 0 ? 300 : 40);
            for (uint32_t w = 0; w < n && len < sizeof bodies[d] - 32; w++) {
                uint32_t r = support_rng_below(VOCABULARY);
                uint32_t term = support_rng_below(r + 1); /* small ranks more often */
                uint32_t repeat = d % 23 == 0 && w == 0 ? 5 + support_rng_below(40) : 1;
                for (uint32_t k = 0; k < repeat && len < sizeof bodies[d] - 32; k++)
                    len += (size_t)snprintf(b + len, sizeof bodies[d] - len, "%sw%u", len ? " " : "", term);
            }
        }
        fprintf(f, "{\"id\": \"doc-%05u\", \"title\": \"w%u\", \"body\": \"%s\"", d, support_rng_below(VOCABULARY), b);
        if (d % 4) fprintf(f, ", \"prior\": %.3f", support_rng_unit() * 2.0);
        fputs("}\n", f);
    }
    assert_int_equal(fclose(f), 0);
}

static isn_build_options options(void) {
    isn_build_options o;
    isn_build_options_default(&o);
    o.progress = false;
    o.order = ISN_ORDER_GLOBAL;
    return o;
}

static isn_index *build_and_open(const isn_build_options *o, const char *name) {
    char dir[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    support_remove_tree(dir);
    isn_build_summary s;
    if (isn_build_from_file(corpus_path, dir, o, &s, err, sizeof err) != 0) fail_msg("build %s: %s", name, err);
    assert_int_equal(s.docs, DOCS);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open %s: %s", name, err);
    return ix;
}

/* Every document's largest term frequency, from the postings. */
static uint32_t *max_tfs_of(const isn_index *ix) {
    const isn_index_info *in = isn_index_get_info(ix);
    uint32_t *max_tf = calloc(in->num_docs, sizeof *max_tf);
    assert_non_null(max_tf);
    isn_cursor c;
    for (uint32_t t = 0; t < in->num_terms; t++) {
        isn_cursor_open(&c, ix, t);
        for (uint32_t d = c.doc; d != ISN_DOC_END; d = isn_cursor_next(&c)) {
            uint32_t tf = isn_cursor_freq(&c);
            if (tf > max_tf[d]) max_tf[d] = tf;
        }
    }
    return max_tf;
}

/* P(d) as ranking scores a term part: isn_bm25_tf_part under the index's norms. */
static float *best_parts_of(const isn_index *ix) {
    const isn_index_info *in = isn_index_get_info(ix);
    uint32_t *max_tf = max_tfs_of(ix);
    float *p = malloc(in->num_docs * sizeof *p);
    assert_non_null(p);
    const float *norms = isn_index_doc_norms(ix);
    for (uint32_t d = 0; d < in->num_docs; d++) p[d] = isn_bm25_tf_part(in->bm25.k1 + 1.0f, max_tf[d], norms[d]);
    free(max_tf);
    return p;
}

/* The input line of a document ("doc-00042"), or its number as the generator drew it ("d000000042"). */
static uint32_t input_position(const isn_index *ix, uint32_t doc) {
    size_t len;
    const char *id = isn_index_doc_id(ix, doc, &len);
    size_t digits = strncmp(id, "doc-", 4) == 0 ? 4 : 1;
    assert_true(len > digits && len < 16);
    char number[16];
    memcpy(number, id + digits, len - digits);
    number[len - digits] = 0;
    return (uint32_t)strtoul(number, NULL, 10);
}

/* GS non-increasing in doc id, equal GS in input order (at least min_ties of them); the stored bounds the
 * suffix maxima of P. */
static void check_order_and_bounds(const isn_index *ix, float prior_weight, uint32_t min_ties) {
    const isn_index_info *in = isn_index_get_info(ix);
    assert_true(in->has_score_bounds);
    const float *bounds = isn_index_score_bounds(ix);
    assert_non_null(bounds);
    float *p = best_parts_of(ix);
    uint32_t ties = 0;
    for (uint32_t d = 0; d < in->num_docs; d++) {
        float gs = p[d];
        if (prior_weight > 0.0f) gs += prior_weight * isn_index_static_score(ix, d);
        if (d) {
            float prev = p[d - 1];
            if (prior_weight > 0.0f) prev += prior_weight * isn_index_static_score(ix, d - 1);
            if (gs > prev) fail_msg("document %u: GS %.9g above the one before (%.9g)", d, (double)gs, (double)prev);
            if (gs == prev) {
                ties++;
                assert_true(input_position(ix, d) > input_position(ix, d - 1));
            }
        }
    }
    assert_true(ties >= min_ties);
    float suffix = 0.0f;
    for (uint32_t d = in->num_docs; d-- > 0;) {
        if (p[d] > suffix) suffix = p[d];
        if (bounds[d] != suffix) fail_msg("document %u: bound %.9g, suffix maximum of P %.9g", d, (double)bounds[d], (double)suffix);
        if (prior_weight == 0.0f) assert_true(bounds[d] == p[d]);
    }
    free(p);
}

static void test_order_is_by_global_score(void **state) {
    (void)state;
    isn_build_options o = options();
    isn_index *ix = build_and_open(&o, "plain");
    check_order_and_bounds(ix, 0.0f, 11); /* the copies tie with their originals */
    isn_index_close(ix);
}

static void test_order_with_prior(void **state) {
    (void)state;
    isn_build_options o = options();
    snprintf(o.static_score_field, ISN_FIELD_NAME_MAX, "prior");
    o.prior_weight = 0.5f;
    isn_index *ix = build_and_open(&o, "prior");
    assert_true(isn_index_get_info(ix)->has_static_scores);
    check_order_and_bounds(ix, 0.5f, 11);
    /* the prior moved documents: the bounds are suffix maxima, not P itself */
    const float *bounds = isn_index_score_bounds(ix);
    float *p = best_parts_of(ix);
    uint32_t above = 0;
    for (uint32_t d = 0; d < DOCS; d++) above += bounds[d] > p[d];
    assert_true(above > 0);
    free(p);
    isn_index_close(ix);
}

/* Same input, same options: the same bytes, in memory and bounded on 2 threads. */
static void test_deterministic(void **state) {
    (void)state;
    isn_build_options o = options();
    char a[400], b[400], err[ISN_ERR_LEN];
    snprintf(a, sizeof a, "%s/det-a", tmp_root);
    snprintf(b, sizeof b, "%s/det-b", tmp_root);
    isn_build_summary s;
    if (isn_build_from_file(corpus_path, a, &o, &s, err, sizeof err) != 0) fail_msg("%s", err);
    o.threads = 2;
    o.memory_bytes = isn_build_memory_floor(&o);
    if (isn_build_from_file(corpus_path, b, &o, &s, err, sizeof err) != 0) fail_msg("%s", err);
    assert_true(s.runs >= 2);
    char fa[450], fb[450];
    snprintf(fa, sizeof fa, "%s/index.isn", a);
    snprintf(fb, sizeof fb, "%s/index.isn", b);
    size_t la, lb;
    uint8_t *x = support_read_file(fa, &la), *y = support_read_file(fb, &lb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

/* Term frequency of every (term, doc) as a dense table for scoring (small corpus). */
typedef struct {
    uint32_t num_terms, num_docs;
    uint16_t *tf; /* [term][doc] */
    uint32_t *df;
} tf_table;

static tf_table tf_table_of(const isn_index *ix) {
    const isn_index_info *in = isn_index_get_info(ix);
    tf_table t = {in->num_terms, in->num_docs, calloc((size_t)in->num_terms * in->num_docs, sizeof(uint16_t)),
                  calloc(in->num_terms, sizeof(uint32_t))};
    assert_non_null(t.tf);
    assert_non_null(t.df);
    isn_cursor c;
    for (uint32_t term = 0; term < in->num_terms; term++) {
        isn_cursor_open(&c, ix, term);
        for (uint32_t d = c.doc; d != ISN_DOC_END; d = isn_cursor_next(&c)) {
            t.tf[(size_t)term * in->num_docs + d] = (uint16_t)isn_cursor_freq(&c);
            t.df[term]++;
        }
    }
    return t;
}

/* Random queries scored as ranking scores them (a double sum of float products, here in both term
 * orders and also summed in float), against the bound for every doc id. */
static void check_bounds_hold(const isn_index *ix) {
    const isn_index_info *in = isn_index_get_info(ix);
    tf_table t = tf_table_of(ix);
    uint32_t nd = in->num_docs;
    float k1p1 = in->bm25.k1 + 1.0f;
    double *best_after = malloc(nd * sizeof *best_after);
    float *norms = malloc(nd * sizeof *norms);
    assert_non_null(best_after);
    assert_non_null(norms);
    support_rng_seed(4141);
    uint64_t checked = 0, tight = 0;
    for (uint32_t q = 0; q < QUERIES; q++) {
        uint32_t n = 1 + support_rng_below(6), terms[6];
        float weights[6];
        double weight_sum = 0.0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t r = support_rng_below(in->num_terms);
            terms[i] = q % 2 ? support_rng_below(r + 1) : r;
            /* IDF (local, or a global N and df from an aggregator), times a repeat count, or any weight */
            if (q % 3 == 0) weights[i] = isn_bm25_idf(nd, t.df[terms[i]]) * (float)(1 + support_rng_below(3));
            else if (q % 3 == 1) weights[i] = isn_bm25_idf(50u * nd, 1 + support_rng_below(20u * nd));
            else weights[i] = (float)(support_rng_unit() * 10.0);
            weight_sum += weights[i];
        }
        /* the index's own average length, a larger global one (every norm smaller), a smaller one */
        float avg = q % 5 == 3 ? in->avg_doc_len * 1.7f : q % 5 == 4 ? in->avg_doc_len * 0.6f : 0.0f;
        for (uint32_t d = 0; d < nd; d++)
            norms[d] = avg > 0.0f ? isn_bm25_doc_norm(&in->bm25, isn_index_doc_len(ix, d), avg) : isn_index_doc_norms(ix)[d];
        double best = 0.0;
        for (uint32_t d = nd; d-- > 0;) {
            double forward = 0.0, backward = 0.0;
            float in_float = 0.0f;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t tf = t.tf[(size_t)terms[i] * nd + d];
                if (tf) {
                    float part = weights[i] * isn_bm25_tf_part(k1p1, tf, norms[d]);
                    forward += (double)part;
                    in_float += part;
                }
                uint32_t j = n - 1 - i, tfj = t.tf[(size_t)terms[j] * nd + d];
                if (tfj) backward += (double)(weights[j] * isn_bm25_tf_part(k1p1, tfj, norms[d]));
            }
            double score = fmax(fmax(forward, backward), (double)in_float);
            if (score > best) best = score;
            best_after[d] = best;
        }
        for (uint32_t d = 0; d <= nd; d++) {
            double bound;
            assert_true(isn_index_score_bound(ix, d, weight_sum, avg, &bound));
            double truth = d < nd ? best_after[d] : 0.0;
            if (truth > bound)
                fail_msg("query %u (%u terms, average %g): documents from %u score %.17g, above the bound %.17g", q, n,
                         (double)avg, d, truth, bound);
            checked++;
            tight += truth > 0.0 && truth >= bound * 0.999;
        }
    }
    /* the bound is not vacuous: for single-term queries on the top document it is within 0.1% */
    assert_true(tight > 0);
    assert_true(checked == (uint64_t)QUERIES * (nd + 1));
    free(best_after);
    free(norms);
    free(t.tf);
    free(t.df);
}

static void test_bounds_hold_for_random_queries(void **state) {
    (void)state;
    isn_build_options o = options();
    isn_index *ix = build_and_open(&o, "queries");
    check_bounds_hold(ix);
    isn_index_close(ix);
    snprintf(o.static_score_field, ISN_FIELD_NAME_MAX, "prior");
    o.prior_weight = 2.0f;
    o.bm25.k1 = 0.9f;
    o.bm25.b = 0.4f;
    ix = build_and_open(&o, "queries-prior");
    check_bounds_hold(ix);
    isn_index_close(ix);
}

/* A small synthetic partition in global order, two threads, few queries. */
static isn_synth_options small_synth(uint32_t docs, uint32_t vocabulary, double postings_per_doc) {
    isn_synth_options o;
    isn_synth_options_default(&o);
    o.docs = docs;
    o.vocabulary = vocabulary;
    o.postings_per_doc = postings_per_doc;
    o.queries = 10;
    o.threads = 2;
    o.order = ISN_ORDER_GLOBAL;
    return o;
}

/* The GPU's completion of a partly resident query (gpu/backend.c): a search from first_doc seeded with the k-th
 * score of the documents below it, on a partition in global order with a prior. Cut just past the whole search's
 * last answer, with that answer's score as the seed, it finds nothing to add (the merge is the whole search's
 * answer), most often ends by the bound at once, and scores fewer postings over the log than the whole searches
 * do: a seed bounds the k-th score before the top k is full, and after a window that nothing in could compete the
 * next ends at a block's end, not the index's. */
static void test_completion_from_a_seed(void **state) {
    (void)state;
    isn_synth_options o = small_synth(100000, 20000, 30);
    o.queries = 300;
    o.prior_sigma = 1.0;
    char dir[300], log_path[320], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/completion", tmp_root);
    if (isn_synth_build(dir, &o, NULL, err, sizeof err) != 0) fail_msg("synth: %s", err);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    isn_searcher *searcher = isn_searcher_new(ix);
    snprintf(log_path, sizeof log_path, "%s/queries.tsv", dir);
    isn_query_log log;
    if (isn_query_log_read(log_path, true, 0, &log, err, sizeof err) != 0) fail_msg("log: %s", err);
    uint32_t completions = 0, ended = 0;
    uint64_t whole_postings = 0, completion_postings = 0;
    for (size_t i = 0; i < log.count; i++) {
        isn_query q;
        const char *text = log.queries[i].text;
        if (isn_query_parse(searcher, text, strlen(text), &q, err, sizeof err) != 0) fail_msg("parse: %s", err);
        isn_search_options so;
        isn_search_options_default(&so);
        so.k = 10;
        so.prior_weight = 1.0f;
        isn_hit whole[10], rest[10];
        uint32_t n = 0, m = 0;
        isn_search_stats ws, cs;
        if (isn_search(searcher, &q, &so, whole, &n, &ws, err, sizeof err) != 0) fail_msg("search: %s", err);
        if (n < so.k) continue;
        uint32_t cut = 0;
        for (uint32_t h = 0; h < n; h++) cut = whole[h].doc >= cut ? whole[h].doc + 1 : cut;
        so.first_doc = cut;
        so.initial_threshold = whole[n - 1].score;
        if (isn_search(searcher, &q, &so, rest, &m, &cs, err, sizeof err) != 0) fail_msg("completion: %s", err);
        for (uint32_t h = 0; h < m; h++) assert_true(rest[h].score <= whole[n - 1].score && rest[h].doc >= cut);
        completions++;
        ended += cs.ended_by_bound;
        whole_postings += ws.postings_scored;
        completion_postings += cs.postings_scored;
    }
    print_message("%u completions: %u ended by the bound; postings scored %llu, the whole searches %llu\n", completions,
                  ended, (unsigned long long)completion_postings, (unsigned long long)whole_postings);
    assert_true(completions >= 100);
    assert_true(ended * 2 > completions);
    assert_true(completion_postings < whole_postings);
    isn_query_log_free(&log);
    isn_searcher_free(searcher);
    isn_index_close(ix);
}

/* isn-index synth --order global: the drawn partition renumbered by GS, the same bytes twice, and bounds
 * that hold; its postings are the input-order partition's, moved. */
static void test_synth_global_order(void **state) {
    (void)state;
    isn_synth_options o = small_synth(6000, 1500, 20);
    char a[400], b[400], c[400], err[ISN_ERR_LEN];
    snprintf(a, sizeof a, "%s/synth-a", tmp_root);
    snprintf(b, sizeof b, "%s/synth-b", tmp_root);
    snprintf(c, sizeof c, "%s/synth-input", tmp_root);
    isn_build_summary sa, sb, sc;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    memset(&sc, 0, sizeof sc);
    if (isn_synth_build(a, &o, &sa, err, sizeof err) != 0 || isn_synth_build(b, &o, &sb, err, sizeof err) != 0)
        fail_msg("synth: %s", err);
    o.order = ISN_ORDER_INPUT;
    if (isn_synth_build(c, &o, &sc, err, sizeof err) != 0) fail_msg("synth: %s", err);
    assert_int_equal(sa.postings, sc.postings);
    char fa[450], fb[450];
    snprintf(fa, sizeof fa, "%s/index.isn", a);
    snprintf(fb, sizeof fb, "%s/index.isn", b);
    size_t la, lb;
    uint8_t *x = support_read_file(fa, &la), *y = support_read_file(fb, &lb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
    isn_index *ix = isn_index_open(a, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
    check_order_and_bounds(ix, 0.0f, 11);
    check_bounds_hold(ix);
    isn_index_close(ix);
    o.order = ISN_ORDER_BP;
    assert_int_equal(isn_synth_build(c, &o, &sc, err, sizeof err), -1);
    assert_non_null(strstr(err, "input or global"));
}

/* isn-index synth --prior lognormal:SIGMA --prior-weight W: a static score per document (log-normal, median
 * 1), the partition in global order by GS = P + W x it with the bounds P's; its text (--jsonl) carries the same
 * scores as "prior", so that the index built from it with --static-score prior has them. */
static void test_synth_prior(void **state) {
    (void)state;
    isn_synth_options o = small_synth(4000, 1000, 15);
    assert_true(o.prior_sigma == 0.0 && o.prior_weight == 1.0f);
    o.prior_sigma = 1.0;
    o.prior_weight = 0.5f;
    char dir[400], text[400], built[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/synth-prior", tmp_root);
    snprintf(text, sizeof text, "%s/synth-prior.jsonl", tmp_root);
    snprintf(built, sizeof built, "%s/synth-prior-built", tmp_root);
    if (isn_synth_build(dir, &o, NULL, err, sizeof err) != 0) fail_msg("synth: %s", err);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    assert_true(isn_index_get_info(ix)->has_static_scores);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
    check_order_and_bounds(ix, 0.5f, 0);
    check_bounds_hold(ix);
    assert_non_null(isn_index_prior_bounds(ix));
    o.order = ISN_ORDER_INPUT;
    isn_synth_text_summary ts;
    if (isn_synth_jsonl(text, NULL, &o, &ts, err, sizeof err) != 0) fail_msg("synth --jsonl: %s", err);
    isn_build_options b;
    support_jsonl_build_options(&b);
    snprintf(b.static_score_field, sizeof b.static_score_field, "prior");
    isn_build_summary bs;
    if (isn_build_from_file(text, built, &b, &bs, err, sizeof err) != 0) fail_msg("build: %s", err);
    isn_index *from_text = isn_index_open(built, err, sizeof err);
    if (!from_text) fail_msg("open: %s", err);
    float *by_number = calloc(o.docs, sizeof *by_number);
    assert_non_null(by_number);
    for (uint32_t d = 0; d < o.docs; d++) {
        float s = isn_index_static_score(ix, d);
        assert_true(s > 0.0f && isfinite(s));
        by_number[input_position(ix, d)] = s;
    }
    for (uint32_t d = 0; d < o.docs; d++)
        if (isn_index_static_score(from_text, d) != by_number[input_position(from_text, d)])
            fail_msg("document %u: static score %.9g in the text, %.9g in the partition", d,
                     (double)isn_index_static_score(from_text, d), (double)by_number[input_position(from_text, d)]);
    free(by_number);
    isn_index_close(from_text);
    isn_index_close(ix);
    o.prior_sigma = 9.0;
    assert_int_equal(isn_synth_build(dir, &o, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "sigma must be in [0, 8]"));
}

/* isn-index import-ciff --order global: the input-order index exported to CIFF and imported in global
 * order has the global-order build's documents, postings and bounds (its lengths are one field's). */
static void test_ciff_import_global_order(void **state) {
    (void)state;
    isn_build_options o = options();
    o.positions = false;
    isn_index *built = build_and_open(&o, "ciff-global-built");
    o.order = ISN_ORDER_INPUT;
    isn_index *input = build_and_open(&o, "ciff-input");
    isn_index_close(input);
    char dir[400], ciff[400], out[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/ciff-input", tmp_root);
    snprintf(ciff, sizeof ciff, "%s/input.ciff", tmp_root);
    snprintf(out, sizeof out, "%s/ciff-global", tmp_root);
    isn_ciff_summary s;
    if (isn_ciff_export(dir, ciff, &s, err, sizeof err) != 0) fail_msg("export: %s", err);
    isn_ciff_import_options io;
    isn_ciff_import_options_default(&io);
    io.order = ISN_ORDER_GLOBAL;
    if (isn_ciff_import(ciff, out, &io, &s, err, sizeof err) != 0) fail_msg("import: %s", err);
    isn_index *imported = isn_index_open(out, err, sizeof err);
    if (!imported) fail_msg("open: %s", err);
    assert_int_equal(isn_index_verify(imported, err, sizeof err), 0);
    check_order_and_bounds(imported, 0.0f, 11);
    assert_memory_equal(isn_index_score_bounds(imported), isn_index_score_bounds(built), DOCS * sizeof(float));
    for (uint32_t d = 0; d < DOCS; d++) {
        size_t la, lb;
        const char *a = isn_index_doc_id(imported, d, &la), *b = isn_index_doc_id(built, d, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
    }
    uint64_t pa, pb;
    const uint8_t *payload_a = isn_index_postings_payload(imported, &pa), *payload_b = isn_index_postings_payload(built, &pb);
    assert_int_equal(pa, pb);
    assert_memory_equal(payload_a, payload_b, pa);
    isn_index_close(imported);
    isn_index_close(built);
    io.order = ISN_ORDER_ID;
    assert_int_equal(isn_ciff_import(ciff, out, &io, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "global order"));
}

/* Crafted bounds: rising ones and a section without the flag are refused at open, naming the section;
 * lowered ones (still non-increasing, checksums resealed) open, and isn-index verify finds them. */
static void test_crafted_bounds(void **state) {
    (void)state;
    isn_build_options o = options();
    isn_index *ix = build_and_open(&o, "crafted");
    isn_index_close(ix);
    char dir[400], file[450], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/crafted", tmp_root);
    snprintf(file, sizeof file, "%s/index.isn", dir);
    size_t len;
    uint8_t *good = support_read_file(file, &len);
    assert_non_null(good);
    uint8_t *bytes = malloc(len);
    assert_non_null(bytes);
    isn_section_entry *table = (isn_section_entry *)(bytes + sizeof(isn_file_header));
    for (int damage = 0; damage < 3; damage++) {
        memcpy(bytes, good, len);
        assert_true(((isn_file_header *)bytes)->num_sections > SEC_SCORE_BOUNDS);
        float *bounds = (float *)(bytes + table[SEC_SCORE_BOUNDS].offset);
        isn_meta *meta = (isn_meta *)(bytes + table[SEC_META].offset);
        if (damage == 0) bounds[DOCS / 2] = bounds[0] * 2.0f;
        if (damage == 1) meta->flags &= ~ISN_META_SCORE_BOUNDS;
        if (damage == 2)
            for (uint32_t d = 0; d < DOCS; d++) bounds[d] *= 0.5f;
        support_reseal_index(bytes, damage == 1 ? SEC_META : SEC_SCORE_BOUNDS);
        assert_int_equal(support_write_file(file, bytes, len), 0);
        ix = isn_index_open(dir, err, sizeof err);
        if (damage < 2) {
            assert_null(ix);
            if (!strstr(err, "score_bounds")) fail_msg("damage %d: %s", damage, err);
            continue;
        }
        if (!ix) fail_msg("lowered bounds: %s", err);
        assert_int_equal(isn_index_verify(ix, err, sizeof err), -1);
        if (!strstr(err, "score_bounds")) fail_msg("verify: %s", err);
        isn_index_close(ix);
    }
    free(bytes);
    free(good);
}

/* Other orders keep no bounds (their bytes stay as before); a bad prior weight is refused. */
static void test_other_orders_and_bad_weight(void **state) {
    (void)state;
    isn_build_options o = options();
    o.order = ISN_ORDER_INPUT;
    isn_index *ix = build_and_open(&o, "input");
    double bound = 1.0;
    assert_false(isn_index_get_info(ix)->has_score_bounds);
    assert_null(isn_index_score_bounds(ix));
    assert_false(isn_index_score_bound(ix, 0, 1.0, 0.0f, &bound));
    isn_index_close(ix);
    o = options();
    o.prior_weight = -1.0f;
    char err[ISN_ERR_LEN], dir[400];
    snprintf(dir, sizeof dir, "%s/bad-weight", tmp_root);
    isn_build_summary s;
    assert_int_equal(isn_build_from_file(corpus_path, dir, &o, &s, err, sizeof err), -1);
    if (!strstr(err, "prior weight")) fail_msg("error: %s", err);
}

static int setup(void **state) {
    (void)state;
    if (setenv("SOURCE_DATE_EPOCH", "0", 1) != 0) return -1;
    snprintf(corpus_path, sizeof corpus_path, "%s/corpus.jsonl", tmp_root);
    write_corpus();
    return 0;
}

static int cleanup(void **state) {
    (void)state;
    return support_remove_tree(tmp_root);
}

int main(void) {
    if (!mkdtemp(tmp_root)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_is_by_global_score),
        cmocka_unit_test(test_order_with_prior),
        cmocka_unit_test(test_completion_from_a_seed),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_bounds_hold_for_random_queries),
        cmocka_unit_test(test_synth_global_order),
        cmocka_unit_test(test_synth_prior),
        cmocka_unit_test(test_ciff_import_global_order),
        cmocka_unit_test(test_crafted_bounds),
        cmocka_unit_test(test_other_orders_and_bad_weight),
    };
    return cmocka_run_group_tests(tests, setup, cleanup);
}
