/* The cost model's features of a query, from a real index: list lengths and blocks from the
 * lexicon, the lists MaxScore will only probe (their bounds together stay under a threshold that the
 * block maxima guarantee), the keys, the threshold probe and the work it predicts, the algorithm
 * AUTO resolves to, and how AND mode and the exhaustive algorithms change that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler_internal.h"
#include "tests/support/index_builder.h"

#define NUM_DOCS 2000
#define RARE_EVERY 100 /* "rare" in 20 documents, "common" in all */

typedef support_index fixture;

static size_t doc_text(void *user, uint32_t d, char *text, size_t cap) {
    (void)user;
    return (size_t)snprintf(text, cap, "common filler%u%s", d % 7, d % RARE_EVERY == 0 ? " rare" : "");
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    return support_index_build(f, "features", NULL, NUM_DOCS, doc_text, NULL);
}

static int teardown(void **state) {
    support_index_close(*state);
    free(*state);
    return 0;
}

/* The features of a query (parsed into *query, or a scratch one when query is NULL). */
static isn_job_features features_of(fixture *f, const char *text, uint32_t k, isn_mode mode, isn_algo algo,
                                    isn_query *query) {
    char err[ISN_ERR_LEN];
    isn_query parsed;
    if (query == NULL) query = &parsed;
    assert_int_equal(isn_query_parse(f->searcher, text, strlen(text), query, err, sizeof err), 0);
    isn_job_features features;
    isn_job_features_of(f->index, query, k, mode, algo, &features);
    return features;
}

static void lengths_blocks_and_keys(void **state) {
    fixture *f = *state;
    isn_query query;
    isn_job_features x = features_of(f, "common rare", 1, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
    assert_int_equal(x.num_terms, 2);
    assert_int_equal(x.shortest, NUM_DOCS / RARE_EVERY);
    assert_int_equal(x.second_shortest, NUM_DOCS);
    assert_int_equal(x.longest, NUM_DOCS);
    assert_int_equal(x.total, NUM_DOCS + NUM_DOCS / RARE_EVERY);
    assert_int_equal(x.blocks, (NUM_DOCS + 127) / 128 + 1);
    assert_int_equal(x.k, 1);
    /* The rarest term first. */
    assert_int_equal(x.num_keys, 2);
    uint32_t rare_id = query.terms[0].df < query.terms[1].df ? query.terms[0].term_id : query.terms[1].term_id;
    assert_int_equal(x.keys[0], rare_id);
}

/* For top-1, the document holding "rare"'s block maximum scores at least rare's bound alone, which
 * beats common's bound: "common" can only be probed, and only "rare" is walked in full. */
static void maxscore_probes_what_cannot_reach_the_threshold(void **state) {
    fixture *f = *state;
    isn_job_features x = features_of(f, "common rare", 1, ISN_MODE_OR, ISN_ALGO_AUTO, NULL);
    assert_int_equal(x.nonessential_lists, 1);
    assert_int_equal(x.essential, NUM_DOCS / RARE_EVERY);
    /* k above what the block maxima can vouch for: no threshold, everything is walked. */
    x = features_of(f, "common rare", 50, ISN_MODE_OR, ISN_ALGO_AUTO, NULL);
    assert_int_equal(x.nonessential_lists, 0);
    assert_int_equal(x.essential, x.total);
    /* Exhaustive OR walks everything; AND is driven by the shortest list. */
    x = features_of(f, "common rare", 1, ISN_MODE_OR, ISN_ALGO_OR, NULL);
    assert_int_equal(x.essential, x.total);
    x = features_of(f, "common rare", 1, ISN_MODE_AND, ISN_ALGO_AUTO, NULL);
    assert_int_equal(x.mode, ISN_MODE_AND);
    assert_int_equal(x.essential, NUM_DOCS / RARE_EVERY);
    assert_int_equal(x.nonessential_lists, 1);
    /* An empty query has nothing to walk. */
    x = features_of(f, "absent", 10, ISN_MODE_OR, ISN_ALGO_AUTO, NULL);
    assert_int_equal(x.num_terms, 0);
    assert_int_equal(x.total, 0);
    assert_int_equal(x.num_keys, 0);
}

/* What a job the GPU must answer gets (isn_job_features_lists, by way of sched_take_features): the
 * lists' statistics as the quick features have them, but no threshold from the block maxima, so
 * every list is essential and walked in full. A job the CPU may take still gets the block maxima. */
static void gpu_jobs_get_the_lists_alone(void **state) {
    fixture *f = *state;
    isn_query query;
    (void)features_of(f, "common rare", 1, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
    isn_job_features quick, lists;
    isn_job_features_quick(f->index, &query, 1, ISN_MODE_OR, ISN_ALGO_AUTO, &quick);
    isn_job_features_lists(f->index, &query, 1, ISN_MODE_OR, ISN_ALGO_AUTO, &lists);
    assert_int_equal(quick.nonessential_lists, 1); /* rare's block maximum vouches for a threshold */
    assert_int_equal(lists.nonessential_lists, 0);
    assert_int_equal(lists.essential, lists.total);
    assert_int_equal(lists.expected_postings, lists.total);
    assert_true(lists.threshold_probe == 0.0);
    assert_int_equal(lists.total, quick.total);
    assert_int_equal(lists.blocks, quick.blocks);
    assert_int_equal(lists.shortest, quick.shortest);
    assert_int_equal(lists.longest, quick.longest);
    assert_int_equal(lists.num_keys, quick.num_keys);
    assert_int_equal(lists.keys[0], quick.keys[0]);
    assert_int_equal(lists.signature, quick.signature);

    isn_scheduler unused; /* read only for a job without its own index */
    memset(&unused, 0, sizeof unused);
    isn_job job;
    memset(&job, 0, sizeof job);
    job.index = f->index;
    job.query = &query;
    job.k = 1;
    job.mode = ISN_MODE_OR;
    job.algo = ISN_ALGO_AUTO;
    job.placement = ISN_PLACE_GPU;
    sched_take_features(&unused, &job);
    assert_int_equal(job.features.nonessential_lists, 0);
    assert_int_equal(job.features.total, quick.total);
    job.placement = ISN_PLACE_CPU;
    sched_take_features(&unused, &job);
    assert_int_equal(job.features.nonessential_lists, 1);
}

/* Runs `algo` (OR mode) with no seed: returns the k-th score (0 when fewer hits) and fills *stats (may be NULL). */
static double unseeded_search(fixture *f, const isn_query *query, uint32_t k, isn_algo algo, isn_search_stats *stats) {
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = k;
    options.algo = algo;
    options.mode = ISN_MODE_OR;
    isn_hit hits[64];
    uint32_t n = 0;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_search(f->searcher, query, &options, hits, &n, stats, err, sizeof err), 0);
    return n == k ? (double)hits[k - 1].score : 0.0;
}

static double exact_kth_score(fixture *f, const isn_query *query, uint32_t k) {
    return unseeded_search(f, query, k, ISN_ALGO_OR, NULL);
}

/* The threshold probe scores real documents, so it never exceeds the final k-th score; when the
 * probed lists hold the top k it is that score exactly, which needs every other list's share too. */
static void threshold_probe_is_a_real_kth_score(void **state) {
    fixture *f = *state;
    isn_query query;
    /* "rare" (20 documents, all also "common") drives: the top 10 are among them. */
    isn_job_features x = features_of(f, "common rare", 10, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
    double exact = exact_kth_score(f, &query, 10);
    assert_true(exact > 0.0);
    assert_int_equal(x.probe_docs, NUM_DOCS / RARE_EVERY);
    assert_true(x.threshold_probe > 0.0);
    assert_true(x.threshold_probe <= exact * (1 + 1e-6) && x.threshold_probe >= exact * (1 - 1e-6));
    /* "filler3" drives; "common" is only probed, and its share is needed to reach the exact score. */
    x = features_of(f, "common filler3", 5, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
    exact = exact_kth_score(f, &query, 5);
    assert_true(x.threshold_probe >= exact * (1 - 1e-6) && x.threshold_probe <= exact * (1 + 1e-6));
    /* Never above the real k-th score, whatever the query and k. */
    const char *texts[] = {"rare filler1", "common filler2 rare", "filler4 filler5", "common", "rare"};
    const uint32_t ks[] = {1, 3, 10, 25, 64};
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++)
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
            x = features_of(f, texts[t], ks[i], ISN_MODE_OR, ISN_ALGO_AUTO, &query);
            exact = exact_kth_score(f, &query, ks[i]);
            assert_true(x.threshold_probe <= exact * (1 + 1e-6));
            if (x.threshold_probe == 0.0) continue;
            assert_true(x.probe_docs >= ks[i]);
        }
    /* Fewer probed documents than k: no bound. AND mode and the exhaustive algorithms: not probed. */
    x = features_of(f, "rare", 25, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
    assert_true(x.threshold_probe == 0.0);
    x = features_of(f, "common rare", 10, ISN_MODE_AND, ISN_ALGO_AUTO, &query);
    assert_true(x.threshold_probe == 0.0);
    x = features_of(f, "common rare", 10, ISN_MODE_OR, ISN_ALGO_OR, &query);
    assert_true(x.threshold_probe == 0.0);
    /* The quick features are the same query's without the probe. */
    isn_job_features full = features_of(f, "common rare", 10, ISN_MODE_OR, ISN_ALGO_AUTO, &query), quick;
    isn_job_features_quick(f->index, &query, 10, ISN_MODE_OR, ISN_ALGO_AUTO, &quick);
    assert_true(full.threshold_probe > 0.0 && full.probe_docs > 0);
    assert_true(quick.threshold_probe == 0.0);
    assert_int_equal(quick.probe_docs, 0);
    assert_int_equal(quick.total, full.total);
    assert_int_equal(quick.shortest, full.shortest);
    assert_int_equal(quick.signature, full.signature);
}

/* "common rare", top 10: the 20 "rare" documents (ids 0, 100, ...) all score alike and above any
 * document with "common" alone, so the probe (driven by "rare") is their score, which leaves only
 * "rare" essential at the probe and at half of it. An unseeded MaxScore walks "common" until its
 * top 10 holds ten "rare" documents (document 900), then "rare" alone: the probe's own top 10 rose
 * the same way, so the walk it predicts is that one. */
static void probe_work_features(void **state) {
    fixture *f = *state;
    isn_query query;
    isn_job_features x = features_of(f, "common rare", 10, ISN_MODE_OR, ISN_ALGO_MAXSCORE, &query);
    uint64_t rare = NUM_DOCS / RARE_EVERY;
    assert_true(x.threshold_probe > 0.0);
    assert_int_equal(x.algo_resolved, ISN_ALGO_MAXSCORE);
    for (int s = 0; s < 3; s++) assert_int_equal(x.probe_essential[s], rare);
    assert_int_equal(x.probe_candidate_blocks[0], 1); /* rare's one block passes the bar with common's bound */
    assert_true(x.probe_slack > 0.0 && x.probe_slack < 1.0);
    uint64_t walked_common = 9 * RARE_EVERY + 1;
    assert_true(x.probe_walk_postings >= walked_common + rare - 1 && x.probe_walk_postings <= walked_common + rare);
    isn_search_stats stats;
    unseeded_search(f, &query, 10, ISN_ALGO_MAXSCORE, &stats);
    print_message("walk predicted %llu, postings scored %llu\n", (unsigned long long)x.probe_walk_postings,
                  (unsigned long long)stats.postings_scored);
    /* Scored: the walk plus "common" probed for the ten "rare" documents after the switch. */
    assert_true(stats.postings_scored >= x.probe_walk_postings);
    assert_true(stats.postings_scored <= x.probe_walk_postings + rare);

    /* Lower bars leave at least as many postings essential. */
    const char *texts[] = {"rare filler1", "common filler2 rare", "filler4 filler5 common", "common filler3"};
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        x = features_of(f, texts[t], 3, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
        assert_true(x.threshold_probe > 0.0);
        assert_true(x.probe_essential[0] <= x.probe_essential[1] && x.probe_essential[1] <= x.probe_essential[2]);
        assert_true(x.probe_essential[2] <= x.total && x.probe_walk_postings <= x.total);
        assert_true(x.probe_walk_postings >= x.probe_essential[0]);
    }

    /* AUTO resolved as the search resolves it; nothing probed, no work features. */
    x = features_of(f, "rare", 10, ISN_MODE_OR, ISN_ALGO_AUTO, &query);
    assert_int_equal(x.algo_resolved, ISN_ALGO_BMM);
    x = features_of(f, "common rare", 10, ISN_MODE_AND, ISN_ALGO_AUTO, &query);
    assert_int_equal(x.algo_resolved, ISN_ALGO_BMAND);
    assert_true(x.threshold_probe == 0.0 && x.probe_walk_postings == 0 && x.probe_essential[0] == 0);
    x = features_of(f, "common rare", 10, ISN_MODE_OR, ISN_ALGO_WAND, &query);
    assert_int_equal(x.algo_resolved, ISN_ALGO_WAND);
}

/* The features feed the model: a query walking more postings is predicted costlier. */
static void bigger_walks_predict_longer(void **state) {
    fixture *f = *state;
    isn_cost_model model;
    isn_cost_model_init(&model);
    isn_job_features pruned = features_of(f, "common rare", 1, ISN_MODE_OR, ISN_ALGO_AUTO, NULL);
    isn_job_features exhaustive = features_of(f, "common rare", 1, ISN_MODE_OR, ISN_ALGO_OR, NULL);
    double a = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &pruned);
    double b = isn_cost_predict_ns(&model, ISN_DEVICE_CPU, &exhaustive);
    print_message("predicted: %.0f ns pruned, %.0f ns exhaustive\n", a, b);
    assert_true(a > 0 && b > a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lengths_blocks_and_keys),
        cmocka_unit_test(maxscore_probes_what_cannot_reach_the_threshold),
        cmocka_unit_test(gpu_jobs_get_the_lists_alone),
        cmocka_unit_test(threshold_probe_is_a_real_kth_score),
        cmocka_unit_test(probe_work_features),
        cmocka_unit_test(bigger_walks_predict_longer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
