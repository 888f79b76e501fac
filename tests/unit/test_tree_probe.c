/* The threshold probe of query trees (isn_threshold_probe with isn_query.structure): on random bags of words
 * with filters (an int attribute hashing the documents into 10 buckets, a keyword some documents lack, a
 * year) and trees with required and excluded terms, at k 1, 10 and 64, the probe never exceeds the k-th score
 * of the CPU's exhaustive answer to the same tree. A probe that ignored the filters (scoring the documents
 * they drop) would exceed it on most filtered queries: the test asks that many of them have a nonzero probe
 * at all, and checks the bound on each. Trees with phrases or field: clauses have no probe (0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define NUM_DOCS 40000u
#define VOCAB 300u

static support_index tix;
static isn_index *ix;
static isn_searcher *searcher;
static const char *const sections[] = {"admin", "devel", "games", "libs", "net"};

static uint32_t skewed_word(void) {
    double u = support_rng_unit();
    return (uint32_t)(u * u * u * VOCAB);
}

static void write_docs(void *user, FILE *f) {
    (void)user;
    for (uint32_t d = 0; d < NUM_DOCS; d++) {
        fprintf(f, "{\"id\": \"d%06u\", \"body\": \"", d);
        uint32_t len = 3 + support_rng_below(50);
        for (uint32_t i = 0; i < len; i++) fprintf(f, "%sw%u", i ? " " : "", skewed_word());
        if (d % 1000 == 7) fprintf(f, " zrare"); /* a word of 40 documents (drawing nothing from the generator) */
        /* bucket: a hash of the id into 0..9, as bench_gpu --write-buckets makes it */
        uint64_t h = (uint64_t)d * 0x9E3779B97F4A7C15ull;
        fprintf(f, "\", \"bucket\": %u", (uint32_t)((h >> 32) % 10));
        if (support_rng_below(8)) fprintf(f, ", \"section\": \"%s\"", sections[support_rng_below(5)]);
        fprintf(f, ", \"year\": %u}\n", 1990 + support_rng_below(36));
    }
}

static int setup(void **state) {
    (void)state;
    support_rng_seed(4040);
    isn_build_options options;
    support_jsonl_build_options(&options);
    options.num_attributes = 3;
    options.attributes[0] = (isn_attribute_spec){.name = "bucket", .kind = ISN_ATTRIBUTE_INT};
    options.attributes[1] = (isn_attribute_spec){.name = "section", .kind = ISN_ATTRIBUTE_KEYWORD};
    options.attributes[2] = (isn_attribute_spec){.name = "year", .kind = ISN_ATTRIBUTE_INT};
    if (support_index_build_jsonl(&tix, "tree-probe", &options, write_docs, NULL) != 0) return -1;
    ix = tix.index;
    searcher = tix.searcher;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&tix);
    return 0;
}

/* The k-th score of the CPU's exhaustive answer (0 with fewer than k hits). */
static double exact_kth(const isn_query *query, uint32_t k) {
    static isn_hit hits[64];
    isn_search_options so;
    isn_search_options_default(&so);
    so.algo = ISN_ALGO_OR;
    so.k = k;
    uint32_t n = 0;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_search(searcher, query, &so, hits, &n, NULL, err, sizeof err), 0);
    return n == k ? (double)hits[k - 1].score : 0.0;
}

static double probe_of(const isn_query *query, uint32_t k) {
    uint32_t docs = 0;
    return isn_threshold_probe(ix, query, k, NULL, 0, NULL, &docs);
}

/* Parses text with one filter (NULL: none) into *query (valid until the next parse). */
static void parse(const char *text, const char *filter_text, isn_query *query) {
    char err[ISN_ERR_LEN], filter[96];
    isn_filter_spec spec = {0};
    const char *values[8];
    uint32_t num_filters = 0;
    if (filter_text) {
        snprintf(filter, sizeof filter, "%s", filter_text);
        assert_int_equal(isn_filter_parse(filter, &spec, values, 8), 0);
        num_filters = 1;
    }
    if (isn_query_parse_syntax(searcher, text, strlen(text), &spec, num_filters, query, err, sizeof err) != 0)
        fail_msg("'%s': %s", text, err);
}

/* Random bags of words with a filter, and trees with + and -: the probe never exceeds the exhaustive k-th
 * score; most filtered bags get a probe. */
static void test_tree_probe_is_a_bound(void **state) {
    (void)state;
    static const uint32_t ks[] = {1, 10, 64};
    uint32_t checked = 0, nonzero = 0, filtered_k10 = 0, filtered_k10_nonzero = 0;
    double worst = 0.0; /* the largest probe / exact ratio seen */
    for (uint32_t q = 0; q < 240; q++) {
        char text[128], filter[96];
        size_t at = 0;
        const bool operators = q % 3 == 2; /* a third of the queries hold + and - */
        uint32_t words = 1 + support_rng_below(4);
        for (uint32_t i = 0; i < words; i++) {
            uint32_t kind = operators ? support_rng_below(5) : 4; /* 0: required, 1: excluded, else optional */
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%sw%u", i ? " " : "",
                                   kind == 0 ? "+" : kind == 1 ? "-" : "", skewed_word());
        }
        switch (q % 6) {
        case 0: case 1: case 2: snprintf(filter, sizeof filter, "bucket=%u", support_rng_below(10)); break;
        case 3: snprintf(filter, sizeof filter, "bucket in {%u, %u}", support_rng_below(5), 5 + support_rng_below(5)); break;
        case 4: snprintf(filter, sizeof filter, "section!=%s", sections[support_rng_below(5)]); break;
        default: snprintf(filter, sizeof filter, "year>=%u", 2015 + support_rng_below(10)); break;
        }
        isn_query query;
        parse(text, filter, &query);
        assert_non_null(query.structure);
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
            const double probe = probe_of(&query, ks[i]), exact = exact_kth(&query, ks[i]);
            if (probe > exact * (1 + 1e-6))
                fail_msg("'%s' [%s] k %u: probe %.9g above the exact k-th score %.9g", text, filter, ks[i], probe,
                         exact);
            checked++;
            nonzero += probe > 0.0;
            if (exact > 0.0 && probe / exact > worst) worst = probe / exact;
            if (ks[i] == 10 && !operators && q % 6 < 3) {
                filtered_k10++;
                filtered_k10_nonzero += probe > 0.0;
            }
        }
    }
    printf("%u probes of trees checked, %u nonzero (bucket=N, k 10: %u of %u), none above the exact k-th score "
           "(largest probe / exact %.6f)\n",
           checked, nonzero, filtered_k10_nonzero, filtered_k10, worst);
    /* the filter that keeps a tenth of the documents still leaves the probe enough of them to bound top 10 */
    assert_true(filtered_k10_nonzero * 10 >= filtered_k10 * 8);
}

/* A filter that keeps a tenth of the documents lowers the k-th score below the bag's: the tree's probe
 * follows it, where the bag's (the probe before it read trees) lay above the filtered answer. */
static void test_filtered_probe_is_below_the_bag(void **state) {
    (void)state;
    uint32_t above = 0, queries = 0;
    for (uint32_t q = 0; q < 60; q++) {
        char text[64], filter[32];
        snprintf(text, sizeof text, "w%u w%u", skewed_word(), skewed_word());
        snprintf(filter, sizeof filter, "bucket=%u", q % 10);
        isn_query bag;
        parse(text, NULL, &bag);
        assert_null(bag.structure);
        const double bag_probe = probe_of(&bag, 10);
        isn_query tree;
        parse(text, filter, &tree);
        const double tree_probe = probe_of(&tree, 10), exact = exact_kth(&tree, 10);
        assert_true(tree_probe <= exact * (1 + 1e-6));
        queries++;
        above += bag_probe > exact * (1 + 1e-6);
    }
    printf("the bag's probe lies above the filtered answer's 10th score on %u of %u queries\n", above, queries);
    assert_true(above * 2 > queries);
}

/* Under a filter, a rare word beside a common one: the filter keeps fewer than k of the rare list's documents,
 * and the common list is longer than the budget. The probe then drives the common list too, cut at its budget,
 * and finds a k-th best at most the exact one; driven by the rare list alone it found none (0). */
static void test_a_short_filtered_drive_takes_the_next_list(void **state) {
    (void)state;
    for (uint32_t bucket = 0; bucket < 3; bucket++) {
        char filter[16];
        snprintf(filter, sizeof filter, "bucket=%u", bucket);
        isn_query query;
        parse("zrare", filter, &query);
        assert_true(exact_kth(&query, 10) == 0.0); /* the filter keeps fewer than 10 of its 40 documents */
        const char *text = "zrare w0";
        parse(text, filter, &query);
        const double probe = probe_of(&query, 10), exact = exact_kth(&query, 10);
        printf("'%s' [%s]: probe %.6f, exact 10th %.6f\n", text, filter, probe, exact);
        assert_true(exact > 0.0);
        assert_true(probe > 0.0);
        assert_true(probe <= exact * (1 + 1e-6));
    }
}

/* Phrases and field: clauses read positions the probe does not: no probe. */
static void test_phrase_trees_have_no_probe(void **state) {
    (void)state;
    isn_query query;
    parse("\"w1 w2\" w3", NULL, &query);
    assert_non_null(query.structure);
    assert_true(probe_of(&query, 10) == 0.0);
    parse("body:w1 w2", "bucket=1", &query);
    assert_true(probe_of(&query, 10) == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_probe_is_a_bound),
        cmocka_unit_test(test_filtered_probe_is_below_the_bag),
        cmocka_unit_test(test_phrase_trees_have_no_probe),
        cmocka_unit_test(test_a_short_filtered_drive_takes_the_next_list),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
