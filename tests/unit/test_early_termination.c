/* Safe early termination on an index in global order (issue 41): a bag-of-words search ends once the
 * index's score bounds say no later document can enter its full top k. Over random queries, every
 * algorithm, k 1 to 100, OR and AND, the hits and scores equal those of the same search told to ignore
 * the bounds; some searches do end by a bound, and they score fewer postings. On an index in input
 * order (no bounds) nothing ends early. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"
#include "tests/support/random.h"

#define DOCS 4000
#define VOCABULARY 300
#define QUERIES 200

static char tmp_root[] = "/tmp/isn-test-early-termination-XXXXXX";
static char corpus_path[300];

/* Most documents long with each word once (small tf parts); a few short ones repeating words (large
 * ones): in global order those come first, and the bounds of the long tail are low. */
static void write_corpus(void) {
    FILE *f = fopen(corpus_path, "w");
    assert_non_null(f);
    support_rng_seed(7);
    for (uint32_t d = 0; d < DOCS; d++) {
        bool peaked = d % 25 == 0;
        uint32_t words = peaked ? 3 + support_rng_below(5) : 30 + support_rng_below(120);
        fprintf(f, "{\"id\": \"d%u\", \"title\": \"t\", \"body\": \"", d);
        for (uint32_t w = 0; w < words; w++) {
            uint32_t r = support_rng_below(VOCABULARY);
            uint32_t term = support_rng_below(r + 1); /* Zipf-like */
            uint32_t repeat = peaked ? 2 + support_rng_below(6) : 1;
            for (uint32_t k = 0; k < repeat; k++) fprintf(f, "%sw%u", w || k ? " " : "", term);
        }
        fputs("\"}\n", f);
    }
    assert_int_equal(fclose(f), 0);
}

static isn_index *build(isn_doc_order order, const char *name) {
    char dir[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    isn_build_options o;
    isn_build_options_default(&o);
    o.progress = false;
    o.order = order;
    isn_build_summary s;
    if (isn_build_from_file(corpus_path, dir, &o, &s, err, sizeof err) != 0) fail_msg("build %s: %s", name, err);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open %s: %s", name, err);
    return ix;
}

typedef struct {
    uint64_t searches, ended, postings_bounded, postings_ignored;
} tally;

/* The query's search with and without the bounds: the same hits, the same scores. */
static void compare(isn_searcher *searcher, const isn_query *query, isn_algo algo, isn_mode mode, uint32_t k,
                    tally *t) {
    static isn_hit with[100], without[100];
    isn_search_options o;
    isn_search_options_default(&o);
    o.algo = algo;
    o.mode = mode;
    o.k = k;
    uint32_t n_with = 0, n_without = 0;
    isn_search_stats s_with, s_without;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_search(searcher, query, &o, with, &n_with, &s_with, err, sizeof err), 0);
    o.ignore_score_bounds = true;
    assert_int_equal(isn_search(searcher, query, &o, without, &n_without, &s_without, err, sizeof err), 0);
    assert_false(s_without.ended_by_bound);
    assert_true(s_with.complete);
    if (n_with != n_without) fail_msg("%s k=%u: %u hits with the bounds, %u without", isn_algo_name(algo), k, n_with, n_without);
    for (uint32_t i = 0; i < n_with; i++)
        if (with[i].doc != without[i].doc || with[i].score != without[i].score)
            fail_msg("%s k=%u hit %u: doc %u score %.9g with the bounds, doc %u score %.9g without", isn_algo_name(algo),
                     k, i, with[i].doc, (double)with[i].score, without[i].doc, (double)without[i].score);
    t->searches++;
    t->ended += s_with.ended_by_bound;
    t->postings_bounded += s_with.postings_scored;
    t->postings_ignored += s_without.postings_scored;
}

static void run_queries(isn_index *ix, tally *t) {
    isn_searcher *searcher = isn_searcher_new(ix);
    assert_non_null(searcher);
    static const isn_algo algos[] = {ISN_ALGO_OR, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM, ISN_ALGO_AUTO};
    static const uint32_t ks[] = {1, 10, 100};
    support_rng_seed(41);
    for (uint32_t q = 0; q < QUERIES; q++) {
        char text[128];
        size_t len = 0;
        uint32_t words = 1 + support_rng_below(4);
        for (uint32_t w = 0; w < words; w++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%sw%u", w ? " " : "", support_rng_below(VOCABULARY / 3));
        isn_query query;
        char err[ISN_ERR_LEN];
        assert_int_equal(isn_query_parse(searcher, text, len, &query, err, sizeof err), 0);
        for (size_t a = 0; a < sizeof algos / sizeof *algos; a++)
            for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) compare(searcher, &query, algos[a], ISN_MODE_OR, ks[k], t);
        compare(searcher, &query, ISN_ALGO_AND, ISN_MODE_AND, 10, t);
    }
    isn_searcher_free(searcher);
}

static void test_global_order_ends_early_with_the_same_hits(void **state) {
    (void)state;
    isn_index *ix = build(ISN_ORDER_GLOBAL, "global");
    assert_non_null(isn_index_score_bounds(ix));
    tally t = {0};
    run_queries(ix, &t);
    print_message("early termination: %llu of %llu searches ended by a bound; postings scored %llu with the bounds, "
                  "%llu without\n",
                  (unsigned long long)t.ended, (unsigned long long)t.searches, (unsigned long long)t.postings_bounded,
                  (unsigned long long)t.postings_ignored);
    assert_true(t.ended > 0);
    assert_true(t.postings_bounded < t.postings_ignored);
    isn_index_close(ix);
}

static void test_input_order_never_ends_early(void **state) {
    (void)state;
    isn_index *ix = build(ISN_ORDER_INPUT, "input");
    assert_null(isn_index_score_bounds(ix));
    tally t = {0};
    run_queries(ix, &t);
    assert_int_equal(t.ended, 0);
    assert_true(t.postings_bounded == t.postings_ignored);
    isn_index_close(ix);
}

static int setup(void **state) {
    (void)state;
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
        cmocka_unit_test(test_global_order_ends_early_with_the_same_hits),
        cmocka_unit_test(test_input_order_never_ends_early),
    };
    return cmocka_run_group_tests(tests, setup, cleanup);
}
