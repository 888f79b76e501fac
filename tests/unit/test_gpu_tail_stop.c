/* The tail stop (gpu/tail_bound.c), white-box: the first document from which a query's tail bound is below a
 * score is the one a scan of every document finds, with the index's score bounds alone (global order, no
 * prior weighted) and with a static prior weighted, for queries of one to many terms (long lists of many
 * blocks, short ones that end early; past GPU_MAX_TERMS each list is searched whole), intervals that start or end
 * inside the index, and scores from far below to far above what the query's documents reach. tail_stop narrows
 * each list's block search as it bisects; this checks that narrowing against tail_bound's search of each whole
 * list. Runs on the host. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/posting_decode.h"
#include "gpu/tail_bound.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define NUM_DOCS 20000u
#define VOCAB 3000u
#define QUERIES 150u

static support_index test_index;

/* Skewed words (a few lists of many blocks, many short ones) and a log-normal prior. */
static void write_docs(void *user, FILE *f) {
    (void)user;
    support_rng_seed(7);
    for (uint32_t d = 0; d < NUM_DOCS; d++) {
        fprintf(f, "{\"id\": \"d%u\", \"body\": \"", d);
        for (uint32_t i = 0, n = 3 + support_rng_below(support_rng_below(8) == 0 ? 80 : 20); i < n; i++)
            fprintf(f, "%sw%u", i ? " " : "",
                    (uint32_t)(VOCAB * support_rng_unit() * support_rng_unit() * support_rng_unit()));
        fprintf(f, "\", \"prior\": %.9g}\n", exp(support_rng_normal()));
    }
}

static int setup(void **state) {
    (void)state;
    isn_build_options o;
    support_jsonl_build_options(&o);
    snprintf(o.static_score_field, sizeof o.static_score_field, "prior");
    o.order = ISN_ORDER_GLOBAL;
    o.positions = false;
    return support_index_build_jsonl(&test_index, "gpu-tail-stop", &o, write_docs, NULL);
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&test_index);
    return 0;
}

/* The first id in [from, to) whose bound is below the key, or `to`: every id tried. */
static uint32_t scanned_stop(const tail_bounds *tb, const tail_term *terms, uint32_t n, uint32_t from, uint32_t to,
                             uint32_t key, float prior_weight) {
    for (uint32_t d = from; d < to; d++)
        if (gpu_bound_below(tail_bound(tb, terms, n, d, prior_weight), key)) return d;
    return to;
}

static void check_stops(float prior_weight) {
    const isn_index *ix = test_index.index;
    tail_bounds tb;
    char err[256];
    assert_int_equal(tail_bounds_init(&tb, ix, err, sizeof err), 0);
    assert_non_null(tb.doc_bounds);
    const uint32_t num_terms = isn_index_get_info(ix)->num_terms;
    support_rng_seed(11);
    uint32_t inside = 0, at_end = 0, long_lists = 0;
    for (uint32_t q = 0; q < QUERIES; q++) {
        tail_term terms[GPU_MAX_TERMS + 16];
        const uint32_t n = 1 + support_rng_below(q % 10 == 0 ? GPU_MAX_TERMS + 16 : 5);
        for (uint32_t t = 0; t < n; t++) {
            isn_term_stats st;
            /* common words often (the first words are the commonest): their lists have many blocks */
            uint32_t id = support_rng_below(num_terms);
            if (support_rng_below(2)) {
                char word[16];
                const int len = snprintf(word, sizeof word, "w%u", support_rng_below(12));
                assert_true(isn_index_find_term(ix, word, (size_t)len, &id));
            }
            isn_index_term_stats(ix, id, &st);
            long_lists += st.num_blocks > 16;
            /* now and then a term that scores nothing, as an excluded one */
            const float weight = support_rng_below(12) == 0 ? 0.0f : isn_bm25_idf(NUM_DOCS, st.df);
            terms[t] = (tail_term){(uint32_t)st.first_block, st.num_blocks, weight};
        }
        const double top = tail_bound(&tb, terms, n, 0, prior_weight);
        const uint32_t from = q % 3 == 0 ? support_rng_below(NUM_DOCS / 2) : 0;
        const uint32_t to = q % 4 == 0 ? from + 1 + support_rng_below(NUM_DOCS - from) : NUM_DOCS;
        for (uint32_t s = 0; s < 6; s++) {
            /* from a tenth of the top bound to above it */
            const float score = (float)(top * (0.1 + 0.2 * s + 0.05 * support_rng_unit()));
            const uint32_t key = gpu_float_key(score);
            const uint32_t want = scanned_stop(&tb, terms, n, from, to, key, prior_weight);
            const uint32_t got = tail_stop(&tb, terms, n, from, to, key, prior_weight);
            if (got != want)
                fail_msg("query %u (%u terms), [%u, %u), score %g, prior weight %g: stop %u, a scan finds %u", q, n,
                         from, to, (double)score, (double)prior_weight, got, want);
            inside += want > from && want < to;
            at_end += want == to;
        }
    }
    printf("prior weight %g: %u stops inside their interval, %u at its end; %u lists of over 16 blocks\n",
           (double)prior_weight, inside, at_end, long_lists);
    /* the cases the narrowing could get wrong were there */
    assert_true(inside > QUERIES);
    assert_true(at_end > 0);
    assert_true(long_lists > QUERIES);
    tail_bounds_free(&tb);
}

static void test_stop_is_the_scanned_one(void **state) {
    (void)state;
    check_stops(0.0f);
}

static void test_stop_is_the_scanned_one_with_a_prior(void **state) {
    (void)state;
    check_stops(1.0f);
    check_stops(4.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_is_the_scanned_one),
        cmocka_unit_test(test_stop_is_the_scanned_one_with_a_prior),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
