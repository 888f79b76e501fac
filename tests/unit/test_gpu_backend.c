/* GPU first-stage backend against the CPU's isn_search on random Zipf collections that span several
 * doc-id ranges: exact top-k equality for OR and AND, k from 1 to 10000; residency under a small budget;
 * candidate overflow; an injected device error turning the backend unhealthy with CPU answers.
 * Every check runs on the emulated device (host, runs in CI); the same checks run on a real GPU when
 * there is one, and say they skip when there is none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "scheduler/scheduler_internal.h"
#include "tests/support/gpu_device.h"
#include "tests/support/index_builder.h"
#include "tests/support/random.h"

#define NUM_DOCS 20000u
#define VOCAB 3000u

static double zipf_cdf[VOCAB];
static uint32_t zipf_term(void) {
    double u = support_rng_unit();
    uint32_t lo = 0, hi = VOCAB - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (zipf_cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static support_index test_index;
static isn_index *ix;
static isn_searcher *searcher;

static size_t doc_text(void *user, uint32_t d, char *text, size_t cap) {
    (void)user;
    (void)d;
    uint32_t len = 3 + (uint32_t)(support_rng_unit() * support_rng_unit() * 150);
    size_t at = 0;
    for (uint32_t i = 0; i < len; i++) at += (size_t)snprintf(text + at, cap - at, "w%u ", zipf_term());
    return at;
}

static int setup(void **state) {
    (void)state;
    double sum = 0;
    for (uint32_t t = 0; t < VOCAB; t++) sum += 1.0 / (t + 1.0);
    double acc = 0;
    for (uint32_t t = 0; t < VOCAB; t++) zipf_cdf[t] = (acc += 1.0 / (t + 1.0) / sum);
    if (support_index_build(&test_index, "gpu", NULL, NUM_DOCS, doc_text, NULL) != 0) return -1;
    ix = test_index.index;
    searcher = test_index.searcher;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&test_index);
    return 0;
}

/* A batch of random queries: 1..6 terms drawn from the Zipf head and body, owned by the batch. */
#define MAX_QUERY_TERMS 160

#define MAX_BATCH_QUERIES 640

typedef struct {
    uint32_t n;
    isn_query queries[MAX_BATCH_QUERIES];
    isn_query_term terms[MAX_BATCH_QUERIES][MAX_QUERY_TERMS];
    isn_gpu_request requests[MAX_BATCH_QUERIES];
    isn_hit *hits;
    isn_hit *expected;
    uint32_t expected_n[MAX_BATCH_QUERIES];
} batch;

/* Terms per query: 1..6, or long_terms..long_terms+31 when long_terms (the dense path's chunks). */
static uint32_t long_terms;
/* Requests carry the CPU's threshold probe (isnd's cost model computes it for every query). */
static bool seeded = true;

static void batch_fill(batch *bt, uint32_t n, uint32_t k, isn_mode mode) {
    assert_true(n <= MAX_BATCH_QUERIES);
    bt->n = n;
    free(bt->hits);
    free(bt->expected);
    bt->hits = calloc((size_t)n * k, sizeof *bt->hits);
    bt->expected = calloc((size_t)n * k, sizeof *bt->expected);
    assert_non_null(bt->hits);
    assert_non_null(bt->expected);
    for (uint32_t q = 0; q < n; q++) {
        uint32_t nt = long_terms ? long_terms + (uint32_t)(support_rng_next() % 32)
                                 : 1 + (uint32_t)(support_rng_next() % (mode == ISN_MODE_AND ? 3 : 6));
        isn_query *query = &bt->queries[q];
        query->terms = bt->terms[q];
        query->num_terms = 0;
        query->num_unknown = 0;
        query->structure = NULL;
        for (uint32_t t = 0; t < nt; t++) {
            char word[16];
            uint32_t w = mode == ISN_MODE_AND ? (uint32_t)(support_rng_next() % 40)
                         : long_terms ? (uint32_t)(support_rng_next() % VOCAB)
                                      : zipf_term();
            snprintf(word, sizeof word, "w%u", w);
            uint32_t id;
            if (!isn_index_find_term(ix, word, strlen(word), &id)) {
                query->num_unknown++;
                continue;
            }
            bool seen = false;
            for (uint32_t j = 0; j < query->num_terms; j++)
                if (query->terms[j].term_id == id) {
                    query->terms[j].count++;
                    seen = true;
                }
            if (seen) continue;
            isn_term_stats st;
            isn_index_term_stats(ix, id, &st);
            query->terms[query->num_terms++] = (isn_query_term){.term_id = id, .count = 1, .df = st.df};
        }
        isn_search_options so;
        isn_search_options_default(&so);
        so.mode = mode;
        so.k = k;
        char err[256];
        assert_int_equal(isn_search(searcher, query, &so, bt->expected + (size_t)q * k, &bt->expected_n[q], NULL, err,
                                    sizeof err),
                         0);
        bt->requests[q] = (isn_gpu_request){.query = query, .mode = mode, .k = k, .hits = bt->hits + (size_t)q * k};
        /* the cost model's probe seeds the device's pruning, as isnd passes it (0 where it has none) */
        uint32_t probed = 0;
        if (mode == ISN_MODE_OR && seeded) bt->requests[q].threshold = isn_threshold_probe(ix, query, k, NULL, 0, NULL, &probed);
    }
}

/* Returns how many requests the device answered; fails on any difference from the CPU. */
static uint32_t batch_check(const batch *bt, uint32_t k) {
    uint32_t on_device = 0;
    for (uint32_t q = 0; q < bt->n; q++) {
        const isn_gpu_request *r = &bt->requests[q];
        on_device += r->answered_by == ISN_GPU_ANSWERED_DEVICE;
        if (r->num_hits != bt->expected_n[q])
            fail_msg("query %u (k %u, %u terms, %s): %u hits, CPU %u", q, k, bt->queries[q].num_terms,
                     r->fallback_reason ? r->fallback_reason : "device", r->num_hits, bt->expected_n[q]);
        for (uint32_t i = 0; i < r->num_hits; i++) {
            isn_hit got = r->hits[i], want = bt->expected[(size_t)q * k + i];
            if (got.doc != want.doc || got.score != want.score)
                fail_msg("query %u (k %u) hit %u: doc %u score %.9g, CPU doc %u score %.9g", q, k, i, got.doc,
                         (double)got.score, want.doc, (double)want.score);
        }
    }
    return on_device;
}

static bool and_by_ranges;

/* The tests' backend options, with the given pruning mode and max_batch (open_backend: AUTO, 256). */
static isn_gpu_options test_options(bool emulate, uint64_t budget, uint32_t max_candidates, int pruning,
                                    uint32_t max_batch) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.pruning = pruning;
    o.and_by_ranges = and_by_ranges;
    o.emulate = emulate;
    o.memory_budget = budget;
    o.max_batch = max_batch;
    o.max_k = 10000;
    o.max_candidates = max_candidates;
    return o;
}

static isn_gpu_backend *open_options(const isn_gpu_options *o) {
    char err[256];
    isn_gpu_backend *b = isn_gpu_open(ix, o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    return b;
}

static isn_gpu_backend *open_backend_with(bool emulate, uint64_t budget, uint32_t max_candidates, int pruning,
                                          uint32_t max_batch) {
    const isn_gpu_options o = test_options(emulate, budget, max_candidates, pruning, max_batch);
    return open_options(&o);
}

static isn_gpu_backend *open_backend(bool emulate, uint64_t budget, uint32_t max_candidates) {
    return open_backend_with(emulate, budget, max_candidates, ISN_GPU_PRUNE_AUTO, 256);
}

/* Runs the batch (which must be accepted) and checks every answer against the CPU's; returns how many
 * the device answered. */
static uint32_t search_checked(isn_gpu_backend *b, batch *bt, uint32_t k, isn_gpu_batch_stats *st) {
    char err[256];
    assert_int_equal(isn_gpu_search_batch(b, bt->requests, bt->n, st, err, sizeof err), 0);
    return batch_check(bt, k);
}

/* The checks run on both devices take theirs from the test's state: the emulated device always, a
 * real GPU where there is one (skipped otherwise). */
static const bool EMULATED = true, REAL_GPU = false;
#define ON_EMULATED(test) {#test "_emulated", test, NULL, NULL, (void *)&EMULATED}
#define ON_GPU(test) {#test "_gpu", test, NULL, NULL, (void *)&REAL_GPU}

static bool device_under_test(void **state) {
    bool emulate = *(const bool *)*state;
    if (!emulate && !support_have_gpu()) skip();
    return emulate;
}

/* Every k, OR and AND, with the given pruning fixed (not left to AUTO's choice, so that both paths are
 * checked whatever AUTO would pick). */
static void check_equality(bool emulate, int pruning) {
    isn_gpu_backend *b = open_backend_with(emulate, 0, 0, pruning, 256);
    static batch bt;
    static const uint32_t ks[] = {1, 10, 100, 1000, 10000};
    for (int mode = 0; mode < 2; mode++)
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            uint32_t n = ks[i] >= 1000 ? (emulate ? 12 : 64) : (emulate ? 48 : 256);
            batch_fill(&bt, n, ks[i], mode ? ISN_MODE_AND : ISN_MODE_OR);
            isn_gpu_batch_stats st;
            uint32_t on_device = search_checked(b, &bt, ks[i], &st);
            printf("%s %s%s %s k=%u: %u/%u on the device, %llu candidates, %llu ranges pruned of %llu, %llu rescored\n",
                   emulate ? "emulated" : "GPU", mode ? "AND" : "OR", and_by_ranges ? " by ranges" : "",
                   st.pruned ? "pruned" : "exhaustive", ks[i], on_device, bt.n, (unsigned long long)st.candidates,
                   (unsigned long long)st.ranges_pruned, (unsigned long long)(st.ranges_scored + st.ranges_pruned),
                   (unsigned long long)st.ranges_rescored);
            assert_true(on_device > bt.n / 2);
            assert_int_equal(st.pruned, pruning == ISN_GPU_PRUNE_ALWAYS);
        }
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_true(h.healthy);
    assert_int_equal(h.terms_resident, h.terms_total);
    isn_gpu_close(b);
}

static void test_equality(void **state) {
    bool emulate = device_under_test(state);
    check_equality(emulate, ISN_GPU_PRUNE_ALWAYS);
    check_equality(emulate, ISN_GPU_PRUNE_NEVER);
}

/* A batch of more queries than one call of the device's candidate sort takes (256): the sort runs in
 * calls over consecutive queries, and every query's answer is still the CPU's, OR and AND. */
static void test_large_batch(void **state) {
    bool emulate = device_under_test(state);
    isn_gpu_backend *b = open_backend_with(emulate, 0, 0, ISN_GPU_PRUNE_AUTO, MAX_BATCH_QUERIES);
    static batch bt;
    for (int mode = 0; mode < 2; mode++) {
        batch_fill(&bt, 600, 10, mode ? ISN_MODE_AND : ISN_MODE_OR);
        isn_gpu_batch_stats st;
        assert_int_equal(search_checked(b, &bt, 10, &st), bt.n);
    }
    isn_gpu_close(b);
}

/* Unpruned, a disjunctive batch still samples: the sampled ranges' k-th best report is the other
 * ranges' report floor, so they report only documents that reach it (without a floor from the CPU's
 * probe: k above its limit, or none given), and the answers stay the CPU's. */
static void test_sampled_floor(void **state) {
    bool emulate = device_under_test(state);
    isn_gpu_backend *b = open_backend_with(emulate, 0, 0, ISN_GPU_PRUNE_NEVER, 256);
    static batch bt;
    seeded = false;
    batch_fill(&bt, 64, 1, ISN_MODE_OR);
    seeded = true;
    isn_gpu_batch_stats st;
    assert_int_equal(search_checked(b, &bt, 1, &st), bt.n);
    printf("%s sampled floor OR k=1: %llu reports from %llu ranges\n", emulate ? "emulated" : "GPU",
           (unsigned long long)st.reports, (unsigned long long)st.ranges_scored);
    assert_false(st.pruned);
    /* without the floor every range of this index reports its range_top (4 at k = 1) documents */
    assert_true(st.reports < 3 * st.ranges_scored);
    isn_gpu_close(b);
}

static void set_env(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

/* A partition's device memory taken in pieces (as a large partition's is: gpu/device_memory.h) serves
 * the same answers as one allocation: every region of this small index in pieces here. */
static void test_device_memory_in_pieces(void **state) {
    (void)state;
    if (!support_have_gpu()) skip();
    set_env("ISN_GPU_PIECES_FROM_MIB", "0");
    check_equality(false, ISN_GPU_PRUNE_ALWAYS);
    set_env("ISN_GPU_PIECES_FROM_MIB", NULL);
}

/* The CUDA device scores each range query in the smallest accumulator layout whose counters hold its
 * sums: the narrow one on this index, the compact one without it (ISN_GPU_NARROW=0), the wide one without
 * either; narrow ranges with a floor are reported from the log of slots their adds took to the floor, from a
 * dense scan where the log overflows (ISN_GPU_CROSSING_LOG=1: every range with two such slots), or from their
 * bitmap (ISN_GPU_DENSE_FLOOR=0). The answers are the CPU's in each. On this index the narrow ranges with a
 * floor are those at k = 10 (at k = 1,000 none has one), so the report paths are checked there. */
static void test_accumulator_layouts(void **state) {
    (void)state;
    if (!support_have_gpu()) skip();
    set_env("ISN_GPU_BOUND_PASS", "0"); /* its queries would take the bound pass (test_bound_pass) */
    static const struct {
        const char *narrow, *compact, *dense_floor, *crossing_log;
        isn_gpu_accumulator expected;
    } cases[] = {{NULL, NULL, NULL, NULL, ISN_GPU_ACC_NARROW},
                 {NULL, NULL, NULL, "1", ISN_GPU_ACC_NARROW}, /* the log overflows into the dense scan */
                 {NULL, NULL, "0", NULL, ISN_GPU_ACC_NARROW}, /* narrow ranges with floors keep their bitmap */
                 {"0", NULL, NULL, NULL, ISN_GPU_ACC_COMPACT},
                 {"0", "0", NULL, NULL, ISN_GPU_ACC_WIDE}};
    static const uint32_t ks[] = {10, 1000};
    static batch bt;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        set_env("ISN_GPU_NARROW", cases[c].narrow);
        set_env("ISN_GPU_COMPACT", cases[c].compact);
        set_env("ISN_GPU_DENSE_FLOOR", cases[c].dense_floor);
        set_env("ISN_GPU_CROSSING_LOG", cases[c].crossing_log);
        isn_gpu_backend *b = open_backend_with(false, 0, 0, ISN_GPU_PRUNE_NEVER, 256);
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            batch_fill(&bt, 64, ks[i], ISN_MODE_OR);
            isn_gpu_batch_stats st;
            assert_int_equal(search_checked(b, &bt, ks[i], &st), bt.n);
            printf("GPU OR k=%u, narrow %s compact %s dense floor %s crossing log %s: %u narrow, %u compact, %u wide; "
                   "%llu ranges reported from their log, %llu from a scan\n",
                   ks[i], cases[c].narrow ? "off" : "on", cases[c].compact ? "off" : "on",
                   cases[c].dense_floor ? "off" : "on", cases[c].crossing_log ? cases[c].crossing_log : "default",
                   st.accumulator_queries[ISN_GPU_ACC_NARROW], st.accumulator_queries[ISN_GPU_ACC_COMPACT],
                   st.accumulator_queries[ISN_GPU_ACC_WIDE], (unsigned long long)st.ranges_logged,
                   (unsigned long long)st.ranges_scanned);
            assert_true(st.accumulator_queries[cases[c].expected] > 0);
            if (cases[c].expected != ISN_GPU_ACC_NARROW || cases[c].dense_floor) {
                assert_int_equal(st.ranges_logged + st.ranges_scanned, 0); /* no narrow range reports that way */
            } else if (ks[i] == 10 && cases[c].crossing_log) {
                assert_true(st.ranges_scanned > 0); /* the log of one slot overflows */
            } else if (ks[i] == 10) {
                assert_true(st.ranges_logged > 0); /* with a high floor few slots reach it: the log holds them */
            }
            for (int a = cases[c].expected + 1; a < ISN_GPU_ACC_KINDS; a++) assert_int_equal(st.accumulator_queries[a], 0);
        }
        isn_gpu_close(b);
    }
    set_env("ISN_GPU_NARROW", NULL);
    set_env("ISN_GPU_COMPACT", NULL);
    set_env("ISN_GPU_DENSE_FLOOR", NULL);
    set_env("ISN_GPU_CROSSING_LOG", NULL);
    set_env("ISN_GPU_BOUND_PASS", NULL);
}

/* The bound pass (gpu/kernels.h): unpruned narrow queries with short report lists score groups of ranges in
 * upper-bound counters, then exactly only the ranges that can hold answers. The answers are the CPU's: with
 * the log of slots that reach the floor, with that log overflowing into a scan of the group's counts
 * (ISN_GPU_CROSSING_LOG=1), with a block scoring every group (the lists' cursors carried from group to
 * group), and with the pass off (ISN_GPU_BOUND_PASS=0: the short kernel instead) or below k (ISN_GPU_BOUND_MAX_K).
 * On this index k = 1 and 10 have short report lists, k = 1,000 does not. The emulated device runs the same
 * pass (its cut, threshold and marks), without the CUDA kernels' log and block switches. */
static void test_bound_pass(void **state) {
    const bool emulate = device_under_test(state);
    static const struct {
        const char *crossing_log, *min_ranges, *bound_pass, *max_k;
    } cases[] = {{NULL, NULL, NULL, NULL}, {"1", NULL, NULL, NULL}, {NULL, "64", NULL, NULL}, {NULL, NULL, "0", NULL},
                 {NULL, NULL, NULL, "5"}};
    static const uint32_t ks[] = {1, 10, 1000};
    static batch bt;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (emulate && (cases[c].crossing_log || cases[c].min_ranges)) continue; /* CUDA kernels' switches */
        set_env("ISN_GPU_CROSSING_LOG", cases[c].crossing_log);
        set_env("ISN_GPU_MIN_RANGES_PER_BLOCK", cases[c].min_ranges);
        set_env("ISN_GPU_BOUND_PASS", cases[c].bound_pass);
        set_env("ISN_GPU_BOUND_MAX_K", cases[c].max_k);
        isn_gpu_backend *b = open_backend_with(emulate, 0, 0, ISN_GPU_PRUNE_NEVER, 256);
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            batch_fill(&bt, 64, ks[i], ISN_MODE_OR);
            isn_gpu_batch_stats st;
            assert_int_equal(search_checked(b, &bt, ks[i], &st), bt.n);
            printf("%s OR k=%u, crossing log %s, ranges a block at least %s, bound pass %s up to k %s: %u bound, %u "
                   "narrow; %llu groups scanned, %llu ranges rescored, %llu candidates\n",
                   emulate ? "emulated" : "GPU", ks[i], cases[c].crossing_log ? cases[c].crossing_log : "default",
                   cases[c].min_ranges ? cases[c].min_ranges : "1", cases[c].bound_pass ? "off" : "on",
                   cases[c].max_k ? cases[c].max_k : "default",
                   st.accumulator_queries[ISN_GPU_ACC_BOUNDS], st.accumulator_queries[ISN_GPU_ACC_NARROW],
                   (unsigned long long)st.ranges_scanned, (unsigned long long)st.ranges_rescored,
                   (unsigned long long)st.candidates);
            if (cases[c].bound_pass || ks[i] == 1000 || (cases[c].max_k && ks[i] > (uint32_t)atoi(cases[c].max_k))) {
                assert_int_equal(st.accumulator_queries[ISN_GPU_ACC_BOUNDS], 0);
            } else {
                assert_true(st.accumulator_queries[ISN_GPU_ACC_BOUNDS] > 0);
                assert_true(st.ranges_rescored > 0); /* the answers come from the exact rescore */
                if (cases[c].crossing_log && ks[i] == 10) assert_true(st.ranges_scanned > 0);
            }
        }
        isn_gpu_close(b);
    }
    set_env("ISN_GPU_CROSSING_LOG", NULL);
    set_env("ISN_GPU_MIN_RANGES_PER_BLOCK", NULL);
    set_env("ISN_GPU_BOUND_PASS", NULL);
    set_env("ISN_GPU_BOUND_MAX_K", NULL);
}

/* The test index has three ranges, and by default a report block gets one of them (one range a block keeps
 * the device busy): with every range of a query in one block (ISN_GPU_MIN_RANGES_PER_BLOCK), each term's block
 * cursor carries over from range to range and the next range's spans are found while the current one is
 * scored, in every kernel: pruned and exhaustive, OR and AND (by probing and by ranges), and every
 * accumulator layout and report path (test_accumulator_layouts). The answers are the CPU's in each. */
static void test_ranges_carry_over(void **state) {
    if (!support_have_gpu()) skip();
    set_env("ISN_GPU_MIN_RANGES_PER_BLOCK", "64");
    check_equality(false, ISN_GPU_PRUNE_ALWAYS);
    check_equality(false, ISN_GPU_PRUNE_NEVER);
    and_by_ranges = true;
    check_equality(false, ISN_GPU_PRUNE_NEVER);
    and_by_ranges = false;
    test_accumulator_layouts(state);
    set_env("ISN_GPU_MIN_RANGES_PER_BLOCK", NULL);
}

/* The final sort of a batch whose k fit one block runs in one kernel (sorting a query's candidates in the
 * block, or the k smallest when more: conjunctive queries collect every match), else in CUB's segmented
 * sort (ISN_GPU_SEGMENTED_SORT=1 forces it); the answers are the CPU's either way. */
static void test_sort_paths(void **state) {
    (void)state;
    if (!support_have_gpu()) skip();
    static const uint32_t ks[] = {10, 1000, 5000};
    static batch bt;
    for (int segmented = 0; segmented < 2; segmented++) {
        set_env("ISN_GPU_SEGMENTED_SORT", segmented ? "1" : NULL);
        isn_gpu_backend *b = open_backend(false, 0, 0);
        for (int mode = 0; mode < 2; mode++)
            for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
                batch_fill(&bt, 64, ks[i], mode ? ISN_MODE_AND : ISN_MODE_OR);
                isn_gpu_batch_stats st;
                const uint32_t on_device = search_checked(b, &bt, ks[i], &st);
                printf("GPU %s k=%u, %s sort: %u/%u on the device, %llu candidates\n", mode ? "AND" : "OR", ks[i],
                       segmented ? "segmented" : "block", on_device, bt.n, (unsigned long long)st.candidates);
                assert_true(on_device > bt.n / 2);
            }
        isn_gpu_close(b);
    }
    set_env("ISN_GPU_SEGMENTED_SORT", NULL);
}

/* Conjunctive queries through the range passes instead of probing. */
static void test_and_by_ranges(void **state) {
    device_under_test(state); /* a skip comes before the flag is set */
    and_by_ranges = true;
    test_equality(state);
    and_by_ranges = false;
}

/* Disjunctive queries of 100..131 terms: scored in chunks of terms into the dense range accumulator. */
static void test_long_queries(void **state) {
    bool emulate = device_under_test(state);
    isn_gpu_backend *b = open_backend(emulate, 0, 0);
    static batch bt;
    long_terms = 100;
    static const uint32_t ks[] = {10, 1000};
    for (size_t i = 0; i < 2; i++) {
        batch_fill(&bt, emulate ? 6 : 24, ks[i], ISN_MODE_OR);
        isn_gpu_batch_stats st;
        uint32_t on_device = search_checked(b, &bt, ks[i], &st);
        printf("%s long OR k=%u: %u/%u on the device\n", emulate ? "emulated" : "GPU", ks[i], on_device, bt.n);
        assert_int_equal(on_device, bt.n);
    }
    long_terms = 0;
    isn_gpu_close(b);
}

/* Half the payload: a pruned-prefix cache (the most visited lists' leading blocks, each cut at half
 * of it); the device answers below each query's coverage and the CPU completes the rest, still exactly;
 * lists left out are answered on the CPU, by the crew from the batch's submission on (cpu_early: every
 * query with a list missing), not after the device's part. */
static void test_partial_residency(void **state) {
    bool emulate = device_under_test(state);
    uint64_t payload_bytes, num_blocks;
    isn_index_postings_payload(ix, &payload_bytes);
    isn_index_block_metas(ix, &num_blocks);
    uint64_t budget = payload_bytes / 2 + num_blocks * sizeof(isn_block_meta);
    isn_gpu_backend *b = open_backend(emulate, budget, 0);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_true(h.terms_prefix > 0);
    assert_true(h.terms_resident + h.terms_prefix < h.terms_total);
    assert_true(h.bytes_resident <= budget);
    static batch bt;
    static const uint32_t ks[] = {10, 1000, 10};
    for (int i = 0; i < 3; i++) {
        isn_mode mode = i == 2 ? ISN_MODE_AND : ISN_MODE_OR;
        batch_fill(&bt, ks[i] >= 1000 && emulate ? 16 : 64, ks[i], mode);
        isn_gpu_batch_stats st;
        search_checked(b, &bt, ks[i], &st);
        printf("%s %s k=%u: %u answered on prefixes + CPU completion (%llu CPU postings), %u on the CPU (%u from "
               "submission on)\n",
               emulate ? "emulated" : "GPU", mode == ISN_MODE_AND ? "AND" : "OR", ks[i], st.prefix_queries,
               (unsigned long long)st.prefix_cpu_postings, st.cpu_queries, st.cpu_early);
        assert_true(st.fallbacks[ISN_GPU_FALLBACK_NOT_RESIDENT] > 0);
        assert_int_equal(st.cpu_early, st.fallbacks[ISN_GPU_FALLBACK_NOT_RESIDENT]);
    }
    isn_gpu_health_get(b, &h);
    printf("%s: %u of %u lists whole, %u cut (%llu of %llu bytes); %llu queries on prefixes, %llu on the CPU for a "
           "missing list\n",
           emulate ? "emulated" : "GPU", h.terms_resident, h.terms_total, h.terms_prefix,
           (unsigned long long)h.bytes_resident, (unsigned long long)h.index_bytes, (unsigned long long)h.queries_prefix,
           (unsigned long long)h.queries_not_resident);
    assert_true(h.queries_device > 0);
    assert_true(h.queries_prefix > 0);
    isn_gpu_close(b);
}

/* A cache trained on a log whose lists fit the budget whole (beside the block metadata and the attribute columns, all
 * within the budget) holds them whole (they are not cut at prefix_cap), so that log's queries are answered on the
 * device alone: no CPU completion. */
static void test_logged_lists_whole(void **state) {
    bool emulate = device_under_test(state);
    static batch bt;
    batch_fill(&bt, 64, 10, ISN_MODE_OR);
    uint64_t num_blocks;
    isn_index_block_metas(ix, &num_blocks);
    const uint32_t num_terms = isn_index_get_info(ix)->num_terms;
    bool *named = calloc(num_terms, sizeof *named);
    assert_non_null(named);
    uint64_t logged_bytes = 0, longest = 0, all_bytes = 0;
    for (uint32_t q = 0; q < bt.n; q++)
        for (uint32_t t = 0; t < bt.queries[q].num_terms; t++) {
            uint32_t id = bt.queries[q].terms[t].term_id;
            if (named[id]) continue;
            named[id] = true;
            isn_term_stats st;
            isn_index_term_stats(ix, id, &st);
            logged_bytes += isn_gpu_list_bytes(ix, id, st.num_blocks);
            longest = st.num_blocks > longest ? st.num_blocks : longest;
        }
    for (uint32_t id = 0; id < num_terms; id++) {
        isn_term_stats st;
        isn_index_term_stats(ix, id, &st);
        all_bytes += isn_gpu_list_bytes(ix, id, st.num_blocks);
    }
    free(named);
    assert_true(longest > 16); /* lists a prefix_cap of 0.5 would cut */
    assert_true(logged_bytes < all_bytes / 2);
    uint64_t fixed = num_blocks * sizeof(isn_block_meta);
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = true;
    char err[256];
    /* the attribute columns are resident too, within the budget: their bytes from a backend that holds everything */
    isn_gpu_backend *all = isn_gpu_open(ix, &o, err, sizeof err);
    if (!all) fail_msg("isn_gpu_open: %s", err);
    isn_gpu_health h;
    isn_gpu_health_get(all, &h);
    isn_gpu_close(all);
    o.emulate = emulate;
    o.memory_budget = fixed + h.attribute_bytes + logged_bytes;
    o.max_batch = 256;
    o.training_queries = bt.queries;
    o.num_training_queries = bt.n;
    isn_gpu_backend *b = isn_gpu_open(ix, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    isn_gpu_health_get(b, &h);
    assert_true(h.terms_resident < h.terms_total);
    assert_true(h.bytes_resident <= o.memory_budget);
    isn_gpu_batch_stats st;
    assert_int_equal(search_checked(b, &bt, 10, &st), bt.n);
    printf("%s: %u of %u lists resident whole, %u cut; %u of %u queries on the device, %u with a CPU completion\n",
           emulate ? "emulated" : "GPU", h.terms_resident, h.terms_total, h.terms_prefix, st.device_queries, bt.n,
           st.prefix_queries);
    assert_int_equal(st.device_queries, bt.n);
    assert_int_equal(st.prefix_queries, 0);
    isn_gpu_close(b);
}

/* An injected device error: that batch and the next are answered on the CPU, exactly, and health says why. */
static void test_fault(void **state) {
    bool emulate = device_under_test(state);
    isn_gpu_backend *b = open_backend(emulate, 0, 0);
    static batch bt;
    char err[256], metrics[4096];
    isn_gpu_health before;
    isn_gpu_health_get(b, &before);
    assert_true(before.ready && before.healthy);
    assert_int_equal(before.batches, 0); /* the warm-up batch is not counted */
    assert_true(before.seconds_submitting == 0.0 && before.seconds_device_wait == 0.0 && before.seconds_completing == 0.0);
    assert_true(isn_gpu_health_format_metrics(&before, "device=\"0\"", metrics, sizeof metrics) < sizeof metrics);
    assert_non_null(strstr(metrics, "isn_gpu_ready{device=\"0\"} 1\n"));
    assert_non_null(strstr(metrics, "isn_gpu_healthy{device=\"0\"} 1\n"));
    /* the set-up's phases, for an operator to see where a swap's staging went */
    assert_true(before.layout_ms > 0.0 && before.upload_ms > 0.0);
    assert_non_null(strstr(metrics, "isn_gpu_layout_ms{device=\"0\"} "));
    assert_non_null(strstr(metrics, "isn_gpu_upload_ms{device=\"0\"} "));
    batch_fill(&bt, 32, 10, ISN_MODE_OR);
    isn_gpu_inject_fault(b);
    isn_gpu_batch_stats st;
    assert_int_equal(search_checked(b, &bt, 10, &st), 0);
    assert_int_equal(st.cpu_queries, bt.n);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    /* the calling thread's time: staging the batch, and completing it (its 32 answers on the CPU) */
    assert_true(h.seconds_submitting > 0.0 && h.seconds_completing > 0.0 && h.seconds_device_wait >= 0.0);
    assert_false(h.healthy);
    assert_non_null(strstr(h.reason, "injected"));
    assert_int_equal(h.device_errors, 1);
    assert_true(h.ready);
    isn_gpu_health_format_metrics(&h, NULL, metrics, sizeof metrics);
    assert_non_null(strstr(metrics, "isn_gpu_healthy{} 0\n"));
    batch_fill(&bt, 16, 100, ISN_MODE_AND);
    assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, NULL, err, sizeof err), 0);
    assert_int_equal(batch_check(&bt, 100), 0);
    isn_gpu_health_get(b, &h);
    isn_gpu_health_format_metrics(&h, NULL, metrics, sizeof metrics);
    assert_non_null(strstr(metrics, "isn_gpu_cpu_fallbacks_total{reason=\"device_error\"} 32\n"));
    assert_non_null(strstr(metrics, "isn_gpu_cpu_fallbacks_total{reason=\"unhealthy\"} 16\n"));
    assert_non_null(strstr(metrics, "isn_gpu_host_seconds_total{phase=\"submit\"} "));
    assert_non_null(strstr(metrics, "isn_gpu_host_seconds_total{phase=\"device_wait\"} "));
    assert_non_null(strstr(metrics, "isn_gpu_host_seconds_total{phase=\"complete\"} "));
    isn_gpu_close(b);
}

/* A candidate buffer no larger than k: a collection that overflows it cannot be tightened on the
 * device, so those queries are answered on the CPU, exactly, and counted by reason. */
static void test_candidate_overflow_emulated(void **state) {
    (void)state;
    isn_gpu_backend *b = open_backend(true, 0, 10000);
    static batch bt;
    char metrics[4096];
    batch_fill(&bt, 8, 10000, ISN_MODE_OR);
    isn_gpu_batch_stats st;
    search_checked(b, &bt, 10000, &st);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_int_equal(st.fallbacks[ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW], st.cpu_queries);
    assert_int_equal(h.fallbacks[ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW], st.cpu_queries);
    char want[128];
    snprintf(want, sizeof want, "isn_gpu_cpu_fallbacks_total{device=\"0\",reason=\"candidate_overflow\"} %u\n",
             st.cpu_queries);
    assert_true(isn_gpu_health_format_metrics(&h, "device=\"0\"", metrics, sizeof metrics) < sizeof metrics);
    assert_non_null(strstr(metrics, want));
    isn_gpu_close(b);
}

static isn_gpu_backend *open_small(bool emulate, uint32_t max_k, uint32_t max_candidates) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = emulate;
    o.max_batch = 256;
    o.max_k = max_k;
    o.max_candidates = max_candidates;
    char err[256];
    isn_gpu_backend *b = isn_gpu_open(ix, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    return b;
}

/* Common single terms at k = 1000 with room for 2k candidates: thousands of documents tie on the same
 * (tf, length) score, more than the buffer holds at the k-th report's score; the threshold is a
 * document key (score, then doc id) and an overflow is collected again with a tighter key on the
 * device, so none of them falls back to the CPU. */
static void test_ties_without_fallback(void **state) {
    bool emulate = device_under_test(state);
    isn_gpu_backend *b = open_small(emulate, 1000, 2000);
    static batch bt;
    char err[256];
    batch_fill(&bt, 16, 1000, ISN_MODE_OR);
    for (uint32_t q = 0; q < bt.n; q++) { /* one of the 16 most common words, alone */
        char word[16];
        snprintf(word, sizeof word, "w%u", q);
        uint32_t id;
        assert_true(isn_index_find_term(ix, word, strlen(word), &id));
        isn_term_stats ts;
        isn_index_term_stats(ix, id, &ts);
        bt.terms[q][0] = (isn_query_term){.term_id = id, .count = 1, .df = ts.df};
        bt.queries[q].num_terms = 1;
        bt.queries[q].num_unknown = 0;
        bt.queries[q].structure = NULL;
        isn_search_options so;
        isn_search_options_default(&so);
        so.k = 1000;
        assert_int_equal(isn_search(searcher, &bt.queries[q], &so, bt.expected + (size_t)q * 1000, &bt.expected_n[q],
                                    NULL, err, sizeof err),
                         0);
        bt.requests[q].threshold = 0;
    }
    isn_gpu_batch_stats st;
    assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, &st, err, sizeof err), 0);
    for (uint32_t q = 0; q < bt.n; q++)
        if (bt.requests[q].fallback_reason) printf("query %u (df %u): %s\n", q, bt.terms[q][0].df, bt.requests[q].fallback_reason);
    assert_int_equal(batch_check(&bt, 1000), bt.n);
    printf("%s ties k=1000: %u/%u on the device, %u collection retries, %llu candidates\n",
           emulate ? "emulated" : "GPU", st.device_queries, bt.n, st.overflow_retries,
           (unsigned long long)st.candidates);
    assert_int_equal(st.fallbacks[ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW], 0);
    assert_true(st.overflow_retries > 0); /* the case this test is about did arise */
    /* conjunctions of two common words match more documents than a segment holds: probed again */
    for (uint32_t q = 0; q < bt.n; q++) {
        char word[16];
        snprintf(word, sizeof word, "w%u", q + 1);
        uint32_t id;
        assert_true(isn_index_find_term(ix, word, strlen(word), &id));
        isn_term_stats ts;
        isn_index_term_stats(ix, id, &ts);
        bt.terms[q][1] = (isn_query_term){.term_id = id, .count = 1, .df = ts.df};
        bt.queries[q].num_terms = 2;
        bt.requests[q].mode = ISN_MODE_AND;
        isn_search_options so;
        isn_search_options_default(&so);
        so.k = 1000;
        so.mode = ISN_MODE_AND;
        assert_int_equal(isn_search(searcher, &bt.queries[q], &so, bt.expected + (size_t)q * 1000, &bt.expected_n[q],
                                    NULL, err, sizeof err),
                         0);
    }
    assert_int_equal(search_checked(b, &bt, 1000, &st), bt.n);
    printf("%s AND of two common words k=1000: %u/%u on the device, %u probing retries\n",
           emulate ? "emulated" : "GPU", st.device_queries, bt.n, st.overflow_retries);
    assert_int_equal(st.fallbacks[ISN_GPU_FALLBACK_CANDIDATE_OVERFLOW], 0);
    assert_true(st.overflow_retries > 0);
    isn_gpu_close(b);
}

/* Seeded with the CPU's probe, short disjunctive queries at k = 10 leave most postings unscored (whole
 * ranges, essential blocks by their maxima, non-essential blocks by the cells they could lift), with
 * the CPU's answers; unseeded, the sampling round's threshold prunes the other ranges. */
static void test_pruning(void **state) {
    bool emulate = device_under_test(state);
    isn_gpu_backend *b = open_backend_with(emulate, 0, 0, ISN_GPU_PRUNE_ALWAYS, 256);
    static batch bt;
    for (int round = 0; round < 2; round++) {
        seeded = round == 0;
        uint32_t k = seeded ? 10 : 1;
        batch_fill(&bt, 64, k, ISN_MODE_OR);
        isn_gpu_batch_stats st;
        assert_int_equal(search_checked(b, &bt, k, &st), bt.n);
        printf("%s %s OR k=%u: %llu of %llu postings scored, %llu blocks skipped, %llu of %llu ranges pruned\n",
               emulate ? "emulated" : "GPU", seeded ? "seeded" : "unseeded", k, (unsigned long long)st.postings_scored,
               (unsigned long long)st.postings_in_lists, (unsigned long long)st.blocks_skipped,
               (unsigned long long)st.ranges_pruned, (unsigned long long)(st.ranges_pruned + st.ranges_scored));
        assert_true(st.pruned);
        assert_true(st.blocks_skipped > 0);
        assert_true(st.postings_scored < st.postings_in_lists);
        if (!seeded) assert_true(st.ranges_pruned > 0);
    }
    seeded = true;
    isn_gpu_close(b);
}

/* AUTO pruning tries both modes (a run of exhaustive batches, then a run of pruned ones), then runs the
 * one it measured cheaper (and the other now and then); NEVER skips nothing. The answers are the CPU's in
 * every mode. */
static void test_pruning_modes_emulated(void **state) {
    (void)state;
    static batch bt;
    char metrics[4096];
    isn_gpu_backend *b = open_backend(true, 0, 0);
    const uint32_t run = isn_gpu_streams(b) + 1;
    for (uint32_t i = 0; i < 8; i++) {
        batch_fill(&bt, 8, 10, ISN_MODE_OR);
        isn_gpu_batch_stats st;
        assert_int_equal(search_checked(b, &bt, 10, &st), bt.n);
        if (i < run) assert_false(st.pruned);
        else if (i < 2 * run) assert_true(st.pruned);
    }
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_int_equal(h.batches_pruned + h.batches_exhaustive, 8);
    assert_true(h.batches_pruned >= run && h.batches_exhaustive >= run);
    /* one batch at a time: every batch measured its mode alone */
    assert_int_equal(h.samples_pruned, h.batches_pruned);
    assert_int_equal(h.samples_exhaustive, h.batches_exhaustive);
    assert_true(h.ms_per_mposting_pruned > 0 && h.ms_per_mposting_exhaustive > 0);
    isn_gpu_health_format_metrics(&h, NULL, metrics, sizeof metrics);
    assert_non_null(strstr(metrics, "isn_gpu_prune_batches_total{mode=\"pruned\"}"));
    assert_non_null(strstr(metrics, "isn_gpu_prune_cost_samples_total{mode=\"exhaustive\"}"));
    isn_gpu_close(b);
    /* never pruned: no block skipped (the bound pass off: its exact rescore skips blocks at its threshold) */
    set_env("ISN_GPU_BOUND_PASS", "0");
    b = open_backend_with(true, 0, 0, ISN_GPU_PRUNE_NEVER, 256);
    batch_fill(&bt, 16, 10, ISN_MODE_OR);
    isn_gpu_batch_stats st;
    assert_int_equal(search_checked(b, &bt, 10, &st), bt.n);
    assert_false(st.pruned);
    assert_int_equal(st.blocks_skipped, 0);
    isn_gpu_close(b);
    set_env("ISN_GPU_BOUND_PASS", NULL);
}

/* A backend that replaces another on a new generation adopts what AUTO learned there: it does not start
 * over with a run of exhaustive batches, then a run of pruned ones, as a fresh backend does (under a
 * swap's load, those runs on a large partition held queries past their deadlines). */
static void test_pruning_adopted_emulated(void **state) {
    (void)state;
    static batch bt;
    isn_gpu_backend *learned = open_backend(true, 0, 0);
    const uint32_t run = isn_gpu_streams(learned) + 1;
    isn_gpu_batch_stats st;
    for (uint32_t i = 0; i < 2 * run; i++) { /* a fresh backend: E..E, then P..P */
        batch_fill(&bt, 8, 10, ISN_MODE_OR);
        assert_int_equal(search_checked(learned, &bt, 10, &st), bt.n);
        assert_int_equal(st.pruned, i >= run);
    }
    isn_gpu_backend *adopted = open_backend(true, 0, 0);
    isn_gpu_adopt_learning(adopted, learned);
    batch_fill(&bt, 8, 10, ISN_MODE_OR);
    assert_int_equal(search_checked(adopted, &bt, 10, &st), bt.n);
    bool adopted_first = st.pruned;
    /* the learned one's next batch decides from the state the adopted one started from */
    batch_fill(&bt, 8, 10, ISN_MODE_OR);
    assert_int_equal(search_checked(learned, &bt, 10, &st), bt.n);
    assert_int_equal(adopted_first, st.pruned);
    isn_gpu_close(adopted);
    isn_gpu_close(learned);
    /* A fresh backend's first batch is exhaustive: only a learned choice of pruning tells them apart. */
    if (!adopted_first) skip(); /* the emulated device measured exhaustive cheaper this time */
}

/* With two batches in flight, AUTO learns a mode's cost only from batches that ran beside none of the
 * other mode: across the switch from the exhaustive run to the pruned one (E1 E2 E3, then P1 P2 P3, each
 * submitted once the batch two before it completed), E3 completes with P1 in flight and P1 ran beside E3,
 * so neither is learned from; the others are. */
static void test_pruning_learns_alone_emulated(void **state) {
    (void)state;
    static batch bt;
    char err[256];
    isn_gpu_options o = test_options(true, 0, 0, ISN_GPU_PRUNE_AUTO, 256);
    o.streams = 2;
    isn_gpu_backend *b = open_options(&o);
    enum { PER = 8, BATCHES = 6 };
    batch_fill(&bt, PER * BATCHES, 10, ISN_MODE_OR);
    int tickets[BATCHES];
    bool pruned[BATCHES];
    for (int i = 0; i < BATCHES; i++) {
        if (i >= 2) {
            isn_gpu_batch_stats st;
            assert_int_equal(isn_gpu_complete(b, tickets[i - 2], &st, err, sizeof err), 0);
            pruned[i - 2] = st.pruned;
        }
        tickets[i] = isn_gpu_submit(b, bt.requests + PER * i, PER, err, sizeof err);
        assert_true(tickets[i] >= 0);
    }
    for (int i = BATCHES - 2; i < BATCHES; i++) {
        isn_gpu_batch_stats st;
        assert_int_equal(isn_gpu_complete(b, tickets[i], &st, err, sizeof err), 0);
        pruned[i] = st.pruned;
    }
    assert_int_equal(batch_check(&bt, 10), bt.n);
    for (int i = 0; i < BATCHES; i++) assert_int_equal(pruned[i], i >= 3);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_int_equal(h.batches_exhaustive, 3);
    assert_int_equal(h.batches_pruned, 3);
    assert_int_equal(h.samples_exhaustive, 2);
    assert_int_equal(h.samples_pruned, 2);
    isn_gpu_close(b);
}

/* The scheduler's device on top of the backend: every job carries its request, answered (batches
 * split at the device's max_batch) into that request; an unhealthy backend refuses batches. */
static batch sched_bt;

/* Jobs whose request holds an answer. */
static uint32_t sched_answered(void) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < 40; i++) n += sched_bt.requests[i].answered_by != 0;
    return n;
}

/* The scheduler's device over an emulated backend of `streams` streams (batches of 16), and 40 jobs whose
 * requests are sched_bt's (each job's user is its index there). */
static isn_gpu_backend *scheduler_device_with(isn_gpu_device *dev, isn_job *ptrs[40], uint32_t streams) {
    isn_gpu_options o = test_options(true, 0, 0, ISN_GPU_PRUNE_AUTO, 256);
    o.streams = streams;
    isn_gpu_backend *b = open_options(&o);
    batch_fill(&sched_bt, 40, 10, ISN_MODE_OR);
    assert_int_equal(isn_gpu_backend_device_new(b, 0, 16, 0, dev), 0);
    static isn_job jobs[40];
    for (uint32_t i = 0; i < 40; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].gpu_request = &sched_bt.requests[i];
        sched_bt.requests[i].answered_by = 0;
        ptrs[i] = &jobs[i];
    }
    return b;
}

/* The same with the backend's default streams. */
static isn_gpu_backend *scheduler_device(isn_gpu_device *dev, isn_job *ptrs[40]) {
    isn_gpu_options defaults;
    isn_gpu_options_default(&defaults);
    return scheduler_device_with(dev, ptrs, defaults.streams);
}

static void test_scheduler_device_emulated(void **state) {
    (void)state;
    isn_gpu_device dev;
    isn_job *ptrs[40];
    isn_gpu_backend *b = scheduler_device(&dev, ptrs);
    char err[256];
    assert_int_equal(dev.run_batch(dev.state, ptrs, 40, err, sizeof err), 0);
    assert_int_equal(sched_answered(), 40);
    assert_true(batch_check(&sched_bt, 10) > 20);
    isn_gpu_inject_fault(b);
    assert_int_equal(dev.run_batch(dev.state, ptrs, 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "injected"));
    assert_int_equal(dev.run_batch(dev.state, ptrs, 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "unhealthy"));
    isn_gpu_backend_device_free(&dev);
    isn_gpu_close(b);
}

/* Two batches in flight on the scheduler's device: both answered, a third refused as busy until one
 * is completed; a backend swap waits for the batches in flight and holds new ones back meanwhile. */
typedef struct {
    isn_gpu_device *dev;
    isn_gpu_backend *backend;
    atomic_bool done;
} swapper;

static void *swap_backend(void *arg) {
    swapper *sw = arg;
    isn_gpu_backend_device_replace(sw->dev, sw->backend);
    atomic_store(&sw->done, true);
    return NULL;
}

static void test_scheduler_device_pipelined_emulated(void **state) {
    (void)state;
    isn_gpu_device dev;
    isn_job *ptrs[40];
    isn_gpu_backend *b = scheduler_device_with(&dev, ptrs, 2);
    char err[256];
    assert_int_equal(dev.max_in_flight, 2);
    int first = dev.submit(dev.state, ptrs, 16, err, sizeof err);
    int second = dev.submit(dev.state, ptrs + 16, 16, err, sizeof err);
    assert_true(first >= 0 && second >= 0 && first != second);
    assert_int_equal(dev.submit(dev.state, ptrs + 32, 8, err, sizeof err), GPU_DEVICE_BUSY);
    assert_int_equal(sched_answered(), 0);
    assert_int_equal(dev.complete(dev.state, first, err, sizeof err), 0);
    assert_int_equal(sched_answered(), 16);
    int third = dev.submit(dev.state, ptrs + 32, 8, err, sizeof err);
    assert_true(third >= 0);
    assert_int_equal(dev.complete(dev.state, second, err, sizeof err), 0);
    assert_int_equal(dev.complete(dev.state, third, err, sizeof err), 0);
    assert_int_equal(sched_answered(), 40);
    assert_true(batch_check(&sched_bt, 10) > 20);
    assert_int_equal(dev.complete(dev.state, third, err, sizeof err), -1); /* answered already */

    /* A swap while a batch is in flight: it waits for that batch; a new batch is refused as busy. */
    int flying = dev.submit(dev.state, ptrs, 16, err, sizeof err);
    assert_true(flying >= 0);
    swapper sw = {.dev = &dev, .backend = b};
    atomic_init(&sw.done, false);
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, swap_backend, &sw), 0);
    /* the swap has begun once it is pending (a fixed sleep raced with a loaded machine) */
    for (int i = 0; i < 10000 && !isn_gpu_backend_device_replace_pending(&dev); i++) usleep(1000);
    assert_true(isn_gpu_backend_device_replace_pending(&dev));
    assert_false(atomic_load(&sw.done));
    assert_int_equal(dev.submit(dev.state, ptrs + 16, 16, err, sizeof err), GPU_DEVICE_BUSY);
    assert_int_equal(dev.complete(dev.state, flying, err, sizeof err), 0);
    pthread_join(thread, NULL);
    assert_true(atomic_load(&sw.done));
    int after = dev.submit(dev.state, ptrs + 16, 16, err, sizeof err);
    assert_true(after >= 0);
    assert_int_equal(dev.complete(dev.state, after, err, sizeof err), 0);
    isn_gpu_backend_device_free(&dev);
    isn_gpu_close(b);
}

/* A backend of four streams ([gpu] streams = 4) gives the scheduler's device four batches at once, and
 * refuses a fifth as busy until one is completed. */
static void test_scheduler_device_four_streams_emulated(void **state) {
    (void)state;
    isn_gpu_device dev;
    isn_job *ptrs[40];
    isn_gpu_backend *b = scheduler_device_with(&dev, ptrs, 4);
    char err[256];
    assert_int_equal(isn_gpu_streams(b), 4);
    assert_int_equal(dev.max_in_flight, 4);
    int tickets[4];
    for (int i = 0; i < 4; i++) {
        tickets[i] = dev.submit(dev.state, ptrs + 10 * i, 10, err, sizeof err);
        assert_true(tickets[i] >= 0);
    }
    assert_int_equal(dev.submit(dev.state, ptrs, 4, err, sizeof err), GPU_DEVICE_BUSY);
    for (int i = 0; i < 4; i++) assert_int_equal(dev.complete(dev.state, tickets[i], err, sizeof err), 0);
    assert_int_equal(sched_answered(), 40);
    assert_true(batch_check(&sched_bt, 10) > 20);
    isn_gpu_backend_device_free(&dev);
    isn_gpu_close(b);
}

/* isnd's [gpu] streams and the backend's own default agree, and the scheduler's device holds that many
 * batches at once. */
static void test_default_streams(void **state) {
    (void)state;
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    isn_conf conf;
    isn_conf_default(&conf);
    assert_int_equal(o.streams, conf.gpu_streams);
    isn_job *ptrs[40];
    isn_gpu_device dev;
    isn_gpu_backend *b = scheduler_device(&dev, ptrs);
    assert_int_equal(dev.max_in_flight, o.streams);
    isn_gpu_backend_device_free(&dev);
    isn_gpu_close(b);
}

static void test_bad_requests(void **state) {
    (void)state;
    isn_gpu_backend *b = open_backend(true, 0, 0);
    char err[256];
    isn_hit hits[4];
    isn_query q = {0};
    isn_gpu_request r = {.query = &q, .mode = ISN_MODE_OR, .k = 0, .hits = hits};
    assert_int_equal(isn_gpu_submit(b, &r, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "k must be"));
    r.k = 4;
    isn_query_term bad = {.term_id = 1u << 30, .count = 1, .df = 1};
    q.terms = &bad;
    q.num_terms = 1;
    assert_int_equal(isn_gpu_submit(b, &r, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "term 0"));
    assert_int_equal(isn_gpu_complete(b, 5, NULL, err, sizeof err), -1);
    q.num_terms = 0;
    assert_int_equal(isn_gpu_search_batch(b, &r, 1, NULL, err, sizeof err), 0);
    assert_int_equal(r.num_hits, 0);
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.max_k = 20000;
    assert_null(isn_gpu_open(ix, &o, err, sizeof err));
    assert_non_null(strstr(err, "max_k"));
    /* a device the machine does not have: said in words (with or without GPUs here) */
    isn_gpu_options_default(&o);
    o.device = 99;
    assert_null(isn_gpu_open(ix, &o, err, sizeof err));
    if (strcmp(isn_gpu_backend_name(), "none") == 0) assert_non_null(strstr(err, "built without CUDA"));
    else assert_non_null(strstr(err, "no GPU 99 ("));
    for (const char *c = err; *c; c++) assert_true(*c >= 0x20 && *c < 0x7f);
    isn_gpu_close(b);
}

int main(void) {
    support_rng_seed(42);
    const struct CMUnitTest tests[] = {
        ON_EMULATED(test_equality),          ON_EMULATED(test_partial_residency),
        ON_EMULATED(test_logged_lists_whole), ON_GPU(test_logged_lists_whole),
        ON_EMULATED(test_fault),             cmocka_unit_test(test_candidate_overflow_emulated),
        cmocka_unit_test(test_bad_requests), ON_GPU(test_equality),
        ON_GPU(test_partial_residency),      ON_GPU(test_fault),
        ON_EMULATED(test_and_by_ranges),     ON_GPU(test_and_by_ranges),
        ON_EMULATED(test_long_queries),      ON_GPU(test_long_queries),
        ON_EMULATED(test_pruning),           ON_GPU(test_pruning),
        ON_EMULATED(test_large_batch),       ON_GPU(test_large_batch),
        ON_EMULATED(test_sampled_floor),     ON_GPU(test_sampled_floor),
        ON_EMULATED(test_ties_without_fallback), ON_GPU(test_ties_without_fallback),
        cmocka_unit_test(test_scheduler_device_emulated),
        cmocka_unit_test(test_scheduler_device_pipelined_emulated),
        cmocka_unit_test(test_scheduler_device_four_streams_emulated),
        cmocka_unit_test(test_default_streams),
        cmocka_unit_test(test_pruning_modes_emulated),
        cmocka_unit_test(test_pruning_learns_alone_emulated),
        cmocka_unit_test(test_pruning_adopted_emulated),
        cmocka_unit_test(test_accumulator_layouts),
        cmocka_unit_test(test_device_memory_in_pieces),
        ON_EMULATED(test_bound_pass),
        ON_GPU(test_bound_pass),
        cmocka_unit_test(test_ranges_carry_over),
        cmocka_unit_test(test_sort_paths),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
