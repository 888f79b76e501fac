/* A static prior in the first-stage score (isn_search_options.prior_weight, issue 41). On random two-field
 * indexes with positions and an attribute, in input and global order, with priors that tie (zeros among
 * them), that are negative, that dominate BM25 and that are tiny: every algorithm (auto, or, and, maxscore,
 * wand, bmw, bmand, bmm), bags of words and query trees (phrases, +required, -excluded, field:, filters), k 10
 * and 1000, gives exactly the oracle's top k, documents and float scores: every matching document's BM25 as
 * the exhaustive search at weight 0 scores it (itself checked against the brute-force oracle with the prior,
 * tests/support/oracle.c) plus W x its prior, sorted. Seeded with the prior's threshold probe, the pruning
 * algorithms give the same. Weight 0 gives what an index without static scores gives, stats included. In
 * global (and static) order the early end stops a query the prior settles, with the same answer and fewer
 * documents evaluated. Bad weights, and a weight on an index without usable static scores, are refused. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/index_builder.h"
#include "tests/support/oracle.h"
#include "tests/support/random.h"

#define MAX_DOCS 2400
#define VOCABULARY 200
#define MAX_TITLE 4
#define MAX_BODY 60

typedef enum { PRIOR_TIES, PRIOR_SIGNED, PRIOR_DOMINANT, PRIOR_TINY, PRIOR_NONE } prior_kind;
static const char *const kind_names[] = {"ties", "signed", "dominant", "tiny", "none"};
static const char *const langs[] = {"en", "de", "fr"};

/* One corpus and its index; documents by input number, and the index's document d is input[d]. */
typedef struct {
    uint32_t num_docs;
    prior_kind kind;
    uint8_t title_len[MAX_DOCS], body_len[MAX_DOCS], lang[MAX_DOCS];
    uint16_t title[MAX_DOCS][MAX_TITLE], body[MAX_DOCS][MAX_BODY];
    float prior[MAX_DOCS];
    support_index ix;
    uint32_t input[MAX_DOCS];
    float index_prior[MAX_DOCS]; /* by index doc */
    oracle_collection *oracle;   /* by index doc, over title and body */
} fixture;

static char words[VOCABULARY][8];
static double word_cdf[VOCABULARY];

static uint16_t zipf_word(void) {
    return (uint16_t)support_pick_cdf(word_cdf, VOCABULARY, support_rng_unit() * word_cdf[VOCABULARY - 1]);
}

static float draw_prior(prior_kind kind) {
    switch (kind) {
    case PRIOR_TIES: return (float)support_rng_below(4) * 0.5f; /* 0, 0.5, 1, 1.5: ties everywhere */
    case PRIOR_SIGNED: return ((float)support_rng_below(33) - 16.0f) * 0.25f; /* -4 .. 4, zeros included */
    case PRIOR_DOMINANT: return (float)(10.0 * exp(2.0 * support_rng_normal())); /* BM25 here stays below ~30 */
    case PRIOR_TINY: return (float)(support_rng_unit() * 1e-4);
    default: return 0.0f;
    }
}

static void write_docs(void *user, FILE *f) {
    const fixture *fx = user;
    for (uint32_t d = 0; d < fx->num_docs; d++) {
        fprintf(f, "{\"id\": \"d%u\", \"lang\": \"%s\", \"title\": \"", d, langs[fx->lang[d]]);
        for (uint32_t i = 0; i < fx->title_len[d]; i++) fprintf(f, "%s%s", i ? " " : "", words[fx->title[d][i]]);
        fputs("\", \"body\": \"", f);
        for (uint32_t i = 0; i < fx->body_len[d]; i++) fprintf(f, "%s%s", i ? " " : "", words[fx->body[d][i]]);
        fputs("\"", f);
        if (fx->kind != PRIOR_NONE) fprintf(f, ", \"prior\": %.9g", (double)fx->prior[d]);
        fputs("}\n", f);
    }
}

/* Draws the corpus (the same for a seed whatever the prior kind, but for the priors) and builds it. */
static void fixture_open(fixture *fx, uint64_t seed, uint32_t num_docs, prior_kind kind, isn_doc_order order,
                         float build_weight) {
    memset(fx, 0, sizeof *fx);
    fx->num_docs = num_docs;
    fx->kind = kind;
    support_rng_seed(seed);
    for (uint32_t d = 0; d < num_docs; d++) {
        fx->title_len[d] = (uint8_t)(1 + support_rng_below(MAX_TITLE));
        fx->body_len[d] = (uint8_t)(support_rng_below(8) == 0 ? 20 + support_rng_below(MAX_BODY - 20) : 3 + support_rng_below(15));
        fx->lang[d] = (uint8_t)support_rng_below(3);
        for (uint32_t i = 0; i < fx->title_len[d]; i++) fx->title[d][i] = zipf_word();
        for (uint32_t i = 0; i < fx->body_len[d]; i++) fx->body[d][i] = zipf_word();
    }
    support_rng_seed(seed ^ 0x5eed);
    for (uint32_t d = 0; d < num_docs; d++) fx->prior[d] = draw_prior(kind);
    isn_build_options o;
    support_jsonl_build_options(&o);
    if (kind != PRIOR_NONE) snprintf(o.static_score_field, sizeof o.static_score_field, "prior");
    o.order = order;
    o.prior_weight = build_weight;
    o.num_attributes = 1;
    o.attributes[0] = (isn_attribute_spec){.name = "lang", .kind = ISN_ATTRIBUTE_KEYWORD};
    char name[48];
    snprintf(name, sizeof name, "prior-%s", kind_names[kind]);
    if (support_index_build_jsonl(&fx->ix, name, &o, write_docs, fx) != 0) fail_msg("building the %s index", name);
    assert_int_equal(isn_index_get_info(fx->ix.index)->num_docs, num_docs);
    /* the oracle's documents in the index's order: its doc ids are the index's */
    static const char *doc_words[MAX_DOCS][MAX_TITLE + MAX_BODY];
    static const char *const *doc_rows[MAX_DOCS];
    static uint32_t doc_lens[MAX_DOCS];
    for (uint32_t d = 0; d < num_docs; d++) {
        long in = support_doc_id_number(fx->ix.index, d, "d");
        assert_true(in >= 0 && in < (long)num_docs);
        fx->input[d] = (uint32_t)in;
        fx->index_prior[d] = fx->prior[in];
        if (kind != PRIOR_NONE) assert_true(isn_index_static_score(fx->ix.index, d) == fx->prior[in]);
        uint32_t n = 0;
        for (uint32_t i = 0; i < fx->title_len[in]; i++) doc_words[d][n++] = words[fx->title[in][i]];
        for (uint32_t i = 0; i < fx->body_len[in]; i++) doc_words[d][n++] = words[fx->body[in][i]];
        doc_rows[d] = doc_words[d];
        doc_lens[d] = n;
    }
    fx->oracle = oracle_new(num_docs, doc_rows, doc_lens, 1.2, 0.75);
    assert_non_null(fx->oracle);
}

static void fixture_close(fixture *fx) {
    oracle_free(fx->oracle);
    support_index_close(&fx->ix);
}

/* ------------------------------------------------------------------ searching and the oracle */

typedef struct {
    isn_hit hits[MAX_DOCS];
    uint32_t n;
    isn_search_stats stats;
} result;

static void parse(fixture *fx, const char *text, const isn_filter_spec *filters, uint32_t num_filters, isn_query *query) {
    char err[ISN_ERR_LEN] = "";
    if (isn_query_parse_syntax(fx->ix.searcher, text, strlen(text), filters, num_filters, query, err, sizeof err) != 0)
        fail_msg("parsing \"%s\": %s", text, err);
}

static void search(fixture *fx, const isn_query *query, isn_mode mode, isn_algo algo, uint32_t k, float weight,
                   float seed, result *out) {
    isn_search_options o = support_search_options(mode, algo, k);
    assert_true(o.prior_weight == 0.0f);
    o.prior_weight = weight;
    o.initial_threshold = seed;
    char err[ISN_ERR_LEN] = "";
    if (isn_search(fx->ix.searcher, query, &o, out->hits, &out->n, &out->stats, err, sizeof err) != 0)
        fail_msg("search (%s, k %u, W %g): %s", isn_algo_name(algo), k, (double)weight, err);
    assert_true(out->stats.complete);
}

static int by_rank(const void *a, const void *b) {
    const isn_hit *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->doc > y->doc) - (x->doc < y->doc);
}

/* The oracle's top k: every matching document's BM25 as the exhaustive search at weight 0 scores it, plus
 * W x its prior in float (the expression ranking.h promises), best first, ties to the lower doc. */
static void expected_top_k(fixture *fx, const isn_query *query, isn_mode mode, uint32_t k, float weight, result *out) {
    search(fx, query, mode, mode == ISN_MODE_AND ? ISN_ALGO_AND : ISN_ALGO_OR, fx->num_docs, 0.0f, 0.0f, out);
    for (uint32_t i = 0; i < out->n; i++)
        out->hits[i].score = out->hits[i].score + weight * fx->index_prior[out->hits[i].doc];
    qsort(out->hits, out->n, sizeof *out->hits, by_rank);
    if (out->n > k) out->n = k;
}

static void assert_same_hits(const result *expected, const result *got, const char *what) {
    uint32_t at = 0;
    while (at < expected->n && at < got->n && expected->hits[at].doc == got->hits[at].doc &&
           memcmp(&expected->hits[at].score, &got->hits[at].score, sizeof(float)) == 0)
        at++;
    if (at < expected->n || at < got->n)
        fail_msg("%s: %u hits, the oracle %u; first difference at rank %u (doc %u score %.9g, oracle doc %u score %.9g)",
                 what, got->n, expected->n, at, at < got->n ? got->hits[at].doc : 0,
                 at < got->n ? (double)got->hits[at].score : 0.0, at < expected->n ? expected->hits[at].doc : 0,
                 at < expected->n ? (double)expected->hits[at].score : 0.0);
}

/* The brute-force oracle with the prior agrees with the expected top k (in double, to float rounding). */
static void check_brute_force(fixture *fx, const char *const *tokens, uint32_t num_tokens, bool and_mode, float weight,
                              const result *expected) {
    static double with[MAX_DOCS], without[MAX_DOCS], priors[MAX_DOCS];
    static bool matched[MAX_DOCS];
    for (uint32_t d = 0; d < fx->num_docs; d++) priors[d] = fx->index_prior[d];
    oracle_score_all(fx->oracle, tokens, num_tokens, and_mode, 0, without, matched);
    assert_true(oracle_set_prior(fx->oracle, priors, weight));
    uint32_t count = oracle_score_all(fx->oracle, tokens, num_tokens, and_mode, 0, with, matched);
    assert_true(oracle_set_prior(fx->oracle, NULL, 0.0));
    assert_true(expected->n == (count < expected->n ? count : expected->n));
    for (uint32_t i = 0; i < expected->n; i++) {
        uint32_t d = expected->hits[i].doc;
        double scale = fabs(without[d]) + fabs((double)weight * priors[d]) + 1.0;
        if (!matched[d] || fabs(with[d] - (double)expected->hits[i].score) > 1e-5 * scale)
            fail_msg("rank %u doc %u: expected %.9g, brute force %.9g (matched %d)", i, d, (double)expected->hits[i].score,
                     with[d], matched[d]);
    }
}

static const isn_algo or_algos[] = {ISN_ALGO_OR, ISN_ALGO_AUTO, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM};
static const isn_algo and_algos[] = {ISN_ALGO_AND, ISN_ALGO_AUTO, ISN_ALGO_BMAND};
static uint64_t cases;

/* Every algorithm of the mode against the oracle (a tree's pruned ones run its MaxScore); the pruning ones
 * also seeded with the prior's threshold probe where it has one. */
static void check_query(fixture *fx, const char *text, const isn_filter_spec *filters, uint32_t num_filters,
                        isn_mode mode, uint32_t k, float weight) {
    static result expected, got;
    isn_query query;
    parse(fx, text, filters, num_filters, &query);
    expected_top_k(fx, &query, mode, k, weight, &expected);
    const isn_algo *algos = mode == ISN_MODE_AND ? and_algos : or_algos;
    size_t n = mode == ISN_MODE_AND ? sizeof and_algos / sizeof *and_algos : sizeof or_algos / sizeof *or_algos;
    double seed = 0.0, levels[1] = {0.0}, share[1];
    uint32_t probed;
    if (mode == ISN_MODE_OR)
        seed = isn_threshold_probe_prior(fx->ix.index, &query, k, weight, levels, 0, share, &probed);
    assert_true(seed >= 0.0 && (seed == 0.0 || expected.n == k));
    if (seed > 0.0) assert_true(seed <= (double)expected.hits[k - 1].score); /* a real bound */
    for (size_t a = 0; a < n; a++) {
        char what[256];
        snprintf(what, sizeof what, "%s prior, \"%s\"%s, %s k %u W %g, %s", kind_names[fx->kind], text,
                 num_filters ? " (filtered)" : "", mode == ISN_MODE_AND ? "AND" : "OR", k, (double)weight,
                 isn_algo_name(algos[a]));
        search(fx, &query, mode, algos[a], k, weight, 0.0f, &got);
        assert_same_hits(&expected, &got, what);
        if (seed > 0.0 && algos[a] != ISN_ALGO_OR) {
            search(fx, &query, mode, algos[a], k, weight, (float)seed, &got);
            strncat(what, " seeded", sizeof what - strlen(what) - 1);
            assert_same_hits(&expected, &got, what);
        }
        cases++;
    }
}

/* A bag of words of 1-4 Zipf words, its tokens for the brute-force oracle. */
static void bag_query(char *text, size_t cap, const char **tokens, uint32_t *num_tokens) {
    uint32_t n = 1 + support_rng_below(4);
    size_t len = 0;
    text[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        tokens[i] = words[zipf_word()];
        len += (size_t)snprintf(text + len, cap - len, "%s%s", i ? " " : "", tokens[i]);
    }
    *num_tokens = n;
}

/* A query tree: a phrase that some document holds, required, excluded and field: clauses. */
static void tree_query(const fixture *fx, char *text, size_t cap) {
    uint32_t d = support_rng_below(fx->num_docs);
    const char *a = words[zipf_word()], *b = words[zipf_word()], *c = words[zipf_word()];
    const char *p0 = words[fx->body[d][0]], *p1 = words[fx->body[d][1]];
    switch (support_rng_below(6)) {
    case 0: snprintf(text, cap, "\"%s %s\" %s", p0, p1, a); break;
    case 1: snprintf(text, cap, "+%s %s %s", a, b, c); break;
    case 2: snprintf(text, cap, "%s %s -%s", a, b, c); break;
    case 3: snprintf(text, cap, "title:%s %s %s", words[fx->title[d][0]], a, b); break;
    case 4: snprintf(text, cap, "+%s -%s title:%s \"%s %s\"", a, b, c, p0, p1); break;
    default: snprintf(text, cap, "%s %s", a, b); break;
    }
}

static const float weights[] = {0.25f, 1.0f, 7.5f};

/* Bags of words against both oracles, trees against the exact one, with and without a filter. */
static void run_fixture(fixture *fx, uint32_t queries) {
    static result expected;
    isn_filter_spec filter = {.attribute = "lang", .op = ISN_FILTER_EQ, .values = (const char *const[]){"en"}, .num_values = 1};
    for (uint32_t q = 0; q < queries; q++) {
        char text[256];
        const char *tokens[4];
        uint32_t num_tokens;
        bag_query(text, sizeof text, tokens, &num_tokens);
        float w = weights[q % 3];
        for (int and_mode = 0; and_mode < 2; and_mode++) {
            isn_mode mode = and_mode ? ISN_MODE_AND : ISN_MODE_OR;
            isn_query query;
            parse(fx, text, NULL, 0, &query);
            expected_top_k(fx, &query, mode, 1000, w, &expected);
            check_brute_force(fx, tokens, num_tokens, and_mode, w, &expected);
            check_query(fx, text, NULL, 0, mode, 10, w);
            check_query(fx, text, NULL, 0, mode, 1000, w);
        }
        tree_query(fx, text, sizeof text);
        check_query(fx, text, NULL, 0, ISN_MODE_OR, 10, w);
        check_query(fx, text, &filter, 1, ISN_MODE_OR, 10, w);
        check_query(fx, text, NULL, 0, ISN_MODE_AND, 10, w);
        check_query(fx, text, &filter, 1, ISN_MODE_OR, 1000, w);
    }
}

static void test_every_algorithm_gives_the_oracles_top_k(void **state) {
    (void)state;
    static const prior_kind kinds[] = {PRIOR_TIES, PRIOR_SIGNED, PRIOR_DOMINANT, PRIOR_TINY};
    static const isn_doc_order orders[] = {ISN_ORDER_INPUT, ISN_ORDER_GLOBAL};
    static fixture fx;
    cases = 0;
    for (size_t o = 0; o < 2; o++)
        for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
            fixture_open(&fx, 100 + i, 1200 + 300 * (uint32_t)i, kinds[i], orders[o], 1.0f);
            support_rng_seed(7 + i + 10 * o);
            run_fixture(&fx, 12);
            fixture_close(&fx);
        }
    print_message("%llu (query, algorithm) cases with a prior matched the oracle\n", (unsigned long long)cases);
}

/* ------------------------------------------------------------------ the prior's bounds in the index */

static void test_prior_bounds_are_suffix_maxima(void **state) {
    (void)state;
    static fixture fx;
    for (int global = 0; global < 2; global++) {
        fixture_open(&fx, 5, 700, PRIOR_SIGNED, global ? ISN_ORDER_GLOBAL : ISN_ORDER_INPUT, 0.5f);
        const float *bounds = isn_index_prior_bounds(fx.ix.index);
        assert_non_null(bounds);
        float best = -INFINITY, magnitude = 0.0f;
        for (uint32_t d = fx.num_docs; d-- > 0;) {
            if (fx.index_prior[d] > best) best = fx.index_prior[d];
            if (fabsf(fx.index_prior[d]) > magnitude) magnitude = fabsf(fx.index_prior[d]);
            assert_true(bounds[d] == best);
        }
        assert_true(isn_index_static_score_magnitude(fx.ix.index) == magnitude);
        assert_true(isn_index_static_scores_finite(fx.ix.index, NULL));
        fixture_close(&fx);
    }
    fixture_open(&fx, 5, 50, PRIOR_NONE, ISN_ORDER_INPUT, 1.0f);
    assert_null(isn_index_prior_bounds(fx.ix.index));
    assert_null(isn_index_static_scores(fx.ix.index));
    fixture_close(&fx);
}

/* ------------------------------------------------------------------ weight 0 */

/* The same corpus with and without static scores, in input order: at weight 0 every algorithm gives the
 * same hits, scores and work. */
static void test_weight_zero_is_bm25_alone(void **state) {
    (void)state;
    static fixture with, without;
    static result a, b;
    fixture_open(&with, 9, 1500, PRIOR_DOMINANT, ISN_ORDER_INPUT, 1.0f);
    fixture_open(&without, 9, 1500, PRIOR_NONE, ISN_ORDER_INPUT, 1.0f);
    support_rng_seed(99);
    for (uint32_t q = 0; q < 30; q++) {
        char text[256];
        const char *tokens[4];
        uint32_t num_tokens;
        bag_query(text, sizeof text, tokens, &num_tokens);
        for (int and_mode = 0; and_mode < 2; and_mode++) {
            const isn_algo *algos = and_mode ? and_algos : or_algos;
            size_t n = and_mode ? sizeof and_algos / sizeof *and_algos : sizeof or_algos / sizeof *or_algos;
            isn_mode mode = and_mode ? ISN_MODE_AND : ISN_MODE_OR;
            for (size_t i = 0; i < n; i++)
                for (uint32_t k = 10; k <= 1000; k *= 100) {
                    isn_query qa, qb;
                    parse(&with, text, NULL, 0, &qa);
                    search(&with, &qa, mode, algos[i], k, 0.0f, 0.0f, &a);
                    parse(&without, text, NULL, 0, &qb);
                    search(&without, &qb, mode, algos[i], k, 0.0f, 0.0f, &b);
                    assert_same_hits(&b, &a, text);
                    assert_true(a.stats.postings_scored == b.stats.postings_scored &&
                                a.stats.docs_evaluated == b.stats.docs_evaluated &&
                                a.stats.blocks_decoded == b.stats.blocks_decoded &&
                                a.stats.matched_lower_bound == b.stats.matched_lower_bound &&
                                a.stats.algo_used == b.stats.algo_used && a.stats.ended_by_bound == b.stats.ended_by_bound);
                }
        }
    }
    fixture_close(&with);
    fixture_close(&without);
}

/* ------------------------------------------------------------------ the early end */

/* A frequent word's query under a dominant prior: the documents of high prior come first, and once the top
 * k is full the prior's bound falls below the k-th score. The algorithm gives the answer it gives when told
 * to ignore the bounds, and that the exhaustive search gives; with fewer_than_exhaustive it evaluates fewer
 * documents than the exhaustive search (which must then end by the bound: it evaluates every match
 * otherwise; the block-max ones may instead pass the rest by their windows' bounds, the prior's included). */
static void ignoring_bounds(fixture *fx, const isn_query *query, isn_mode mode, isn_algo algo, uint32_t k, result *out) {
    isn_search_options o = support_search_options(mode, algo, k);
    o.prior_weight = 1.0f;
    o.ignore_score_bounds = true;
    char err[ISN_ERR_LEN] = "";
    assert_int_equal(isn_search(fx->ix.searcher, query, &o, out->hits, &out->n, &out->stats, err, sizeof err), 0);
    assert_false(out->stats.ended_by_bound);
}

static void early_end(fixture *fx, const char *text, isn_mode mode, isn_algo algo, uint32_t k, bool fewer_than_exhaustive) {
    static result with, without, exhaustive;
    isn_query query;
    parse(fx, text, NULL, 0, &query);
    search(fx, &query, mode, algo, k, 1.0f, 0.0f, &with);
    ignoring_bounds(fx, &query, mode, algo, k, &without);
    const isn_algo reference = mode == ISN_MODE_AND ? ISN_ALGO_AND : ISN_ALGO_OR;
    ignoring_bounds(fx, &query, mode, reference, k, &exhaustive);
    char what[160];
    snprintf(what, sizeof what, "early end of \"%s\" %s k %u", text, isn_algo_name(algo), k);
    assert_same_hits(&without, &with, what);
    assert_same_hits(&exhaustive, &with, what);
    print_message("%s: ended %d, %llu documents evaluated, %llu ignoring the bounds, %llu by the exhaustive search\n",
                  what, with.stats.ended_by_bound, (unsigned long long)with.stats.docs_evaluated,
                  (unsigned long long)without.stats.docs_evaluated, (unsigned long long)exhaustive.stats.docs_evaluated);
    assert_true(with.stats.docs_evaluated <= without.stats.docs_evaluated);
    if (!fewer_than_exhaustive) return;
    if (with.stats.docs_evaluated >= exhaustive.stats.docs_evaluated || (algo == reference && !with.stats.ended_by_bound))
        fail_msg("%s: did not end early (ended %d, %llu documents evaluated, %llu by the exhaustive search)", what,
                 with.stats.ended_by_bound, (unsigned long long)with.stats.docs_evaluated,
                 (unsigned long long)exhaustive.stats.docs_evaluated);
}

static void test_global_order_ends_early_with_a_prior(void **state) {
    (void)state;
    static fixture fx;
    static const isn_doc_order orders[] = {ISN_ORDER_GLOBAL, ISN_ORDER_STATIC};
    for (size_t o = 0; o < 2; o++) {
        fixture_open(&fx, 21, MAX_DOCS, PRIOR_DOMINANT, orders[o], 1.0f);
        /* the exhaustive algorithms evaluate every match unless the bound ends them */
        early_end(&fx, "w0", ISN_MODE_OR, ISN_ALGO_OR, 10, true);
        early_end(&fx, "w0 w1", ISN_MODE_OR, ISN_ALGO_OR, 1000, true);
        early_end(&fx, "w0 w1", ISN_MODE_AND, ISN_ALGO_AND, 10, true);
        early_end(&fx, "w0 w2", ISN_MODE_OR, ISN_ALGO_AUTO, 10, true);
        early_end(&fx, "w0 w2", ISN_MODE_OR, ISN_ALGO_AUTO, 1000, true); /* the buffered top k */
        early_end(&fx, "w0 w1", ISN_MODE_AND, ISN_ALGO_BMAND, 10, true);
        early_end(&fx, "w0 w3", ISN_MODE_OR, ISN_ALGO_MAXSCORE, 10, true);
        early_end(&fx, "w0 w3", ISN_MODE_OR, ISN_ALGO_WAND, 10, true);
        early_end(&fx, "w0 w3", ISN_MODE_OR, ISN_ALGO_BMW, 10, true);
        early_end(&fx, "w5 w9 w20", ISN_MODE_OR, ISN_ALGO_BMM, 1000, false);
        fixture_close(&fx);
    }
}

/* Block-max MaxScore (what AUTO runs) checks the bound between its windows of 8,192 documents: on a partition
 * of many windows in global order, top-1000 searches end by the prior's bound far before the last one. */
#define LARGE_DOCS 40000u

static void write_large(void *user, FILE *f) {
    (void)user;
    support_rng_seed(77);
    for (uint32_t d = 0; d < LARGE_DOCS; d++) {
        fprintf(f, "{\"id\": \"d%u\", \"title\": \"%s\", \"body\": \"", d, words[zipf_word()]);
        for (uint32_t i = 0, n = 3 + support_rng_below(10); i < n; i++) fprintf(f, "%s%s", i ? " " : "", words[zipf_word()]);
        fprintf(f, "\", \"prior\": %.9g}\n", (double)draw_prior(PRIOR_DOMINANT));
    }
}

static void test_auto_top_1000_ends_early_on_a_large_partition(void **state) {
    (void)state;
    static fixture fx;
    isn_build_options o;
    support_jsonl_build_options(&o);
    snprintf(o.static_score_field, sizeof o.static_score_field, "prior");
    o.order = ISN_ORDER_GLOBAL;
    o.positions = false;
    assert_int_equal(support_index_build_jsonl(&fx.ix, "prior-large", &o, write_large, NULL), 0);
    fx.num_docs = LARGE_DOCS;
    early_end(&fx, "w0 w1", ISN_MODE_OR, ISN_ALGO_AUTO, 1000, true);
    early_end(&fx, "w0 w1 w7", ISN_MODE_OR, ISN_ALGO_AUTO, 10, true);
    early_end(&fx, "w0 w1", ISN_MODE_AND, ISN_ALGO_AUTO, 1000, true);
    static result with;
    isn_query query;
    parse(&fx, "w0 w1", NULL, 0, &query);
    search(&fx, &query, ISN_MODE_OR, ISN_ALGO_AUTO, 1000, 1.0f, 0.0f, &with);
    assert_true(with.stats.ended_by_bound);
    support_index_close(&fx.ix);
}

/* ------------------------------------------------------------------ refusals */

static void expect_refusal(fixture *fx, float weight, const char *needle) {
    isn_query query;
    parse(fx, "w0 w1", NULL, 0, &query);
    isn_search_options o;
    isn_search_options_default(&o);
    o.prior_weight = weight;
    isn_hit hits[10];
    uint32_t n = 7;
    char err[ISN_ERR_LEN] = "";
    assert_int_equal(isn_search(fx->ix.searcher, &query, &o, hits, &n, NULL, err, sizeof err), -1);
    assert_int_equal(n, 0);
    if (!strstr(err, needle)) fail_msg("prior_weight %g: error \"%s\" lacks \"%s\"", (double)weight, err, needle);
    double levels[1], share[1];
    uint32_t probed;
    assert_true(isn_threshold_probe_prior(fx->ix.index, &query, 10, weight, levels, 0, share, &probed) == 0.0);
}

static void write_infinite_prior(void *user, FILE *f) {
    (void)user;
    fputs("{\"id\": \"a\", \"title\": \"w0\", \"body\": \"w1\", \"prior\": 1}\n", f);
    fputs("{\"id\": \"b\", \"title\": \"w0\", \"body\": \"w1 w1\", \"prior\": 1e39}\n", f);
}

static void test_bad_weights_are_refused(void **state) {
    (void)state;
    static fixture fx;
    fixture_open(&fx, 3, 200, PRIOR_DOMINANT, ISN_ORDER_INPUT, 1.0f);
    expect_refusal(&fx, -1.0f, "prior_weight must be a finite weight >= 0");
    expect_refusal(&fx, NAN, "prior_weight must be a finite weight >= 0");
    expect_refusal(&fx, INFINITY, "prior_weight must be a finite weight >= 0");
    expect_refusal(&fx, 3e38f, "overflows a float");
    fixture_close(&fx);
    fixture_open(&fx, 3, 200, PRIOR_NONE, ISN_ORDER_INPUT, 1.0f);
    expect_refusal(&fx, 1.0f, "needs static scores, and this index has none");
    fixture_close(&fx);
    support_index ix;
    isn_build_options o;
    support_jsonl_build_options(&o);
    snprintf(o.static_score_field, sizeof o.static_score_field, "prior");
    assert_int_equal(support_index_build_jsonl(&ix, "prior-infinite", &o, write_infinite_prior, NULL), 0);
    assert_null(isn_index_prior_bounds(ix.index));
    fx.ix = ix;
    fx.oracle = NULL;
    expect_refusal(&fx, 1.0f, "needs finite static scores; document 1's is inf");
    support_index_close(&ix);
}

static int setup(void **state) {
    (void)state;
    double total = 0.0;
    for (uint32_t w = 0; w < VOCABULARY; w++) {
        snprintf(words[w], sizeof words[w], "w%u", w);
        total += pow(w + 1.0, -1.0);
        word_cdf[w] = total;
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prior_bounds_are_suffix_maxima),
        cmocka_unit_test(test_every_algorithm_gives_the_oracles_top_k),
        cmocka_unit_test(test_weight_zero_is_bm25_alone),
        cmocka_unit_test(test_global_order_ends_early_with_a_prior),
        cmocka_unit_test(test_auto_top_1000_ends_early_on_a_large_partition),
        cmocka_unit_test(test_bad_weights_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
