/* Early termination in the first stage: a search whose deadline has passed stops at its first clock
 * check, says so (complete = false, reason "deadline"), and its hits are exactly the top-k of the
 * documents below exact_below_doc, checked against the brute-force oracle, for every algorithm. */
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
#include "tests/support/oracle.h"
#include "tests/support/index_builder.h"

#define NUM_DOCS 6000
#define VOCAB 12
#define MAX_DOC_LEN 12

static const char *const WORDS[VOCAB] = {"alpha", "beta", "gamma", "delta", "eps", "zeta",
                                         "eta",   "theta", "iota", "kappa", "lam", "mu"};

typedef struct {
    support_index ix;
    oracle_collection *oracle;
    const char ***doc_terms;
    uint32_t *doc_lens;
    uint64_t rng;
} fixture;

/* Skewed: low words are frequent, so lists are long and scores varied. Keeps the terms for the oracle. */
static size_t doc_text(void *user, uint32_t d, char *text, size_t cap) {
    fixture *f = user;
    size_t len = 0;
    text[0] = '\0';
    f->doc_lens[d] = 1 + (uint32_t)(d * 7919u % MAX_DOC_LEN);
    f->doc_terms[d] = calloc(f->doc_lens[d], sizeof(char *));
    for (uint32_t i = 0; i < f->doc_lens[d]; i++) {
        f->rng = f->rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t w = (uint32_t)((f->rng >> 33) % VOCAB);
        w = w * w / VOCAB;
        f->doc_terms[d][i] = WORDS[w];
        len += (size_t)snprintf(text + len, cap - len, "%s%s", i ? " " : "", WORDS[w]);
    }
    return len;
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    f->doc_terms = calloc(NUM_DOCS, sizeof *f->doc_terms);
    f->doc_lens = calloc(NUM_DOCS, sizeof *f->doc_lens);
    f->rng = 7;
    if (support_index_build(&f->ix, "early", NULL, NUM_DOCS, doc_text, f) != 0) return -1;
    f->oracle = oracle_new(NUM_DOCS, (const char *const *const *)f->doc_terms, f->doc_lens, 1.2, 0.75);
    return f->oracle ? 0 : -1;
}

static int teardown(void **state) {
    fixture *f = *state;
    support_index_close(&f->ix);
    oracle_free(f->oracle);
    for (uint32_t d = 0; d < NUM_DOCS; d++) free(f->doc_terms[d]);
    free(f->doc_terms);
    free(f->doc_lens);
    free(f);
    return 0;
}

/* The oracle's top-k among documents below `limit`. */
static uint32_t oracle_prefix_top_k(fixture *f, const char *const *terms, uint32_t n, bool and_mode, uint32_t limit,
                                    uint32_t k, oracle_hit *out) {
    static double scores[NUM_DOCS];
    static bool matched[NUM_DOCS];
    oracle_score_all(f->oracle, terms, n, and_mode, 0, scores, matched);
    uint32_t count = 0;
    for (uint32_t d = 0; d < NUM_DOCS && d < limit; d++) {
        if (!matched[d]) continue;
        oracle_hit hit = {d, scores[d]};
        uint32_t at = count < k ? count++ : k;
        if (at == k && !(hit.score > out[k - 1].score)) continue; /* ties: the lower doc (earlier) wins */
        if (at == k) at = k - 1;
        while (at > 0 && hit.score > out[at - 1].score) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = hit;
    }
    return count;
}

static void check_query(fixture *f, const char *const *terms, uint32_t n, isn_mode mode, isn_algo algo, uint32_t k) {
    char text[128] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++) len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", i ? " " : "", terms[i]);
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(f->ix.searcher, text, len, &query, err, sizeof err), 0);
    isn_search_options options;
    isn_search_options_default(&options);
    options.mode = mode;
    options.algo = algo;
    options.k = k;
    options.deadline_ns = 1; /* long past: stop at the first clock check */
    isn_hit hits[64];
    uint32_t num_hits;
    isn_search_stats stats;
    assert_int_equal(isn_search(f->ix.searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err), 0);
    if (stats.complete) {
        /* Fewer candidates than one check interval: it finished before looking at the clock. */
        assert_int_equal(stats.exact_below_doc, UINT32_MAX);
        return;
    }
    assert_string_equal(stats.incomplete_reason, "deadline");
    assert_true(stats.exact_below_doc > 0 && stats.exact_below_doc < NUM_DOCS);
    oracle_hit expected[64];
    uint32_t num_expected =
        oracle_prefix_top_k(f, terms, n, mode == ISN_MODE_AND, stats.exact_below_doc, k, expected);
    assert_int_equal(num_hits, num_expected);
    for (uint32_t i = 0; i < num_hits; i++) {
        assert_true(hits[i].doc < stats.exact_below_doc);
        if (fabs(hits[i].score - expected[i].score) > 1e-4 * fabs(expected[i].score) + 1e-6)
            fail_msg("%s %s k=%u hit %u: doc %u score %.6f, oracle doc %u score %.6f", isn_algo_name(algo), text, k, i,
                     hits[i].doc, hits[i].score, expected[i].doc, expected[i].score);
    }
    /* Without a deadline the same query is complete. */
    options.deadline_ns = 0;
    assert_int_equal(isn_search(f->ix.searcher, &query, &options, hits, &num_hits, &stats, err, sizeof err), 0);
    assert_true(stats.complete);
    assert_string_equal(stats.incomplete_reason, "");
}

static void partial_top_k_is_exact_below_the_stop_point(void **state) {
    fixture *f = *state;
    static const char *const q1[] = {"alpha", "beta"}, *const q2[] = {"alpha", "beta", "gamma", "eta"},
                             *const q3[] = {"alpha"}, *const q4[] = {"beta", "gamma"};
    static const isn_algo or_algos[] = {ISN_ALGO_OR, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM};
    static const isn_algo and_algos[] = {ISN_ALGO_AND, ISN_ALGO_BMAND};
    static const uint32_t ks[] = {1, 10, 50};
    int partial = 0;
    for (size_t ki = 0; ki < 3; ki++) {
        for (size_t a = 0; a < sizeof or_algos / sizeof *or_algos; a++) {
            check_query(f, q1, 2, ISN_MODE_OR, or_algos[a], ks[ki]);
            check_query(f, q2, 4, ISN_MODE_OR, or_algos[a], ks[ki]);
            check_query(f, q3, 1, ISN_MODE_OR, or_algos[a], ks[ki]);
        }
        for (size_t a = 0; a < 2; a++) {
            check_query(f, q1, 2, ISN_MODE_AND, and_algos[a], ks[ki]);
            check_query(f, q4, 2, ISN_MODE_AND, and_algos[a], ks[ki]);
        }
    }
    /* The exhaustive OR over a frequent term must have been cut short. */
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(f->ix.searcher, "alpha beta", 10, &query, err, sizeof err), 0);
    isn_search_options options;
    isn_search_options_default(&options);
    options.algo = ISN_ALGO_OR;
    options.deadline_ns = 1;
    isn_hit hits[10];
    uint32_t n;
    isn_search_stats stats;
    assert_int_equal(isn_search(f->ix.searcher, &query, &options, hits, &n, &stats, err, sizeof err), 0);
    partial += !stats.complete;
    assert_int_equal(partial, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(partial_top_k_is_exact_below_the_stop_point),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
