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
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define NUM_DOCS 20000u
#define VOCAB 3000u

static uint64_t rng_state = 42;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static double zipf_cdf[VOCAB];
static uint32_t zipf_term(void) {
    double u = rng_unit();
    uint32_t lo = 0, hi = VOCAB - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (zipf_cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static char index_dir[64];
static isn_index *ix;
static isn_searcher *searcher;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state) {
    (void)state;
    double sum = 0;
    for (uint32_t t = 0; t < VOCAB; t++) sum += 1.0 / (t + 1.0);
    double acc = 0;
    for (uint32_t t = 0; t < VOCAB; t++) zipf_cdf[t] = (acc += 1.0 / (t + 1.0) / sum);
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_fields = 1;
    snprintf(o.fields[0], sizeof o.fields[0], "body");
    o.analyzer.stem = false;
    o.analyzer.stopwords = false;
    isn_builder *b = isn_builder_new(&o);
    if (!b) return -1;
    char text[8192], id[32], err[256];
    for (uint32_t d = 0; d < NUM_DOCS; d++) {
        uint32_t len = 3 + (uint32_t)(rng_unit() * rng_unit() * 150);
        size_t at = 0;
        for (uint32_t i = 0; i < len; i++) at += (size_t)snprintf(text + at, sizeof text - at, "w%u ", zipf_term());
        snprintf(id, sizeof id, "doc%u", d);
        const char *fields[1] = {text};
        size_t lens[1] = {at};
        if (isn_builder_add(b, id, fields, lens, 0.0f, err, sizeof err) != 0) return -1;
    }
    snprintf(index_dir, sizeof index_dir, "/tmp/isn-test-gpu-XXXXXX");
    if (!mkdtemp(index_dir)) return -1;
    if (isn_builder_write(b, index_dir, NULL, err, sizeof err) != 0) return -1;
    isn_builder_free(b);
    ix = isn_index_open(index_dir, err, sizeof err);
    searcher = ix ? isn_searcher_new(ix) : NULL;
    return searcher ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    isn_searcher_free(searcher);
    isn_index_close(ix);
    nftw(index_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* A batch of random queries: 1..6 terms drawn from the Zipf head and body, owned by the batch. */
typedef struct {
    uint32_t n;
    isn_query queries[256];
    isn_query_term terms[256][6];
    isn_gpu_request requests[256];
    isn_hit *hits;
    isn_hit *expected;
    uint32_t expected_n[256];
} batch;

static void batch_fill(batch *bt, uint32_t n, uint32_t k, isn_mode mode) {
    bt->n = n;
    free(bt->hits);
    free(bt->expected);
    bt->hits = calloc((size_t)n * k, sizeof *bt->hits);
    bt->expected = calloc((size_t)n * k, sizeof *bt->expected);
    assert_non_null(bt->hits);
    assert_non_null(bt->expected);
    for (uint32_t q = 0; q < n; q++) {
        uint32_t nt = 1 + (uint32_t)(rng_next() % (mode == ISN_MODE_AND ? 3 : 6));
        isn_query *query = &bt->queries[q];
        query->terms = bt->terms[q];
        query->num_terms = 0;
        query->num_unknown = 0;
        for (uint32_t t = 0; t < nt; t++) {
            char word[16];
            uint32_t w = mode == ISN_MODE_AND ? (uint32_t)(rng_next() % 40) : zipf_term();
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

static isn_gpu_backend *open_backend(bool emulate, uint64_t budget, uint32_t max_candidates) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = emulate;
    o.memory_budget = budget;
    o.max_batch = 256;
    o.max_k = 10000;
    o.max_candidates = max_candidates;
    char err[256];
    isn_gpu_backend *b = isn_gpu_open(ix, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    return b;
}

static bool have_gpu(void) {
    char err[256];
    if (isn_gpu_device_count(err, sizeof err) > 0) return true;
    printf("real-GPU checks skipped: no GPU (%s backend: %s)\n", isn_gpu_backend_name(), err);
    return false;
}

static void check_equality(bool emulate) {
    isn_gpu_backend *b = open_backend(emulate, 0, 0);
    static batch bt;
    static const uint32_t ks[] = {1, 10, 100, 1000, 10000};
    char err[256];
    for (int mode = 0; mode < 2; mode++)
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            uint32_t n = ks[i] >= 1000 ? (emulate ? 12 : 64) : (emulate ? 48 : 256);
            batch_fill(&bt, n, ks[i], mode ? ISN_MODE_AND : ISN_MODE_OR);
            isn_gpu_batch_stats st;
            assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, &st, err, sizeof err), 0);
            uint32_t on_device = batch_check(&bt, ks[i]);
            printf("%s %s k=%u: %u/%u on the device, %llu candidates, %llu ranges pruned of %llu\n",
                   emulate ? "emulated" : "GPU", mode ? "AND" : "OR", ks[i], on_device, bt.n,
                   (unsigned long long)st.candidates, (unsigned long long)st.ranges_pruned,
                   (unsigned long long)(st.ranges_scored + st.ranges_pruned));
            assert_true(on_device > bt.n / 2);
        }
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_true(h.healthy);
    assert_int_equal(h.terms_resident, h.terms_total);
    isn_gpu_close(b);
}

static void test_equality_emulated(void **state) {
    (void)state;
    check_equality(true);
}

static void test_equality_gpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    check_equality(false);
}

/* Half the payload: the lists left out are answered on the CPU, still exactly. */
static void check_partial_residency(bool emulate) {
    uint64_t payload_bytes, num_blocks;
    isn_index_postings_payload(ix, &payload_bytes);
    isn_index_block_metas(ix, &num_blocks);
    uint64_t budget = payload_bytes / 2 + num_blocks * sizeof(isn_block_meta) + NUM_DOCS * sizeof(float);
    isn_gpu_backend *b = open_backend(emulate, budget, 0);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_true(h.terms_resident > 0 && h.terms_resident < h.terms_total);
    assert_true(h.bytes_resident <= budget);
    static batch bt;
    char err[256];
    batch_fill(&bt, 64, 10, ISN_MODE_OR);
    assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, NULL, err, sizeof err), 0);
    batch_check(&bt, 10);
    isn_gpu_health_get(b, &h);
    printf("%s: %u of %u lists resident (%llu of %llu bytes); %llu queries on the CPU for a missing list\n",
           emulate ? "emulated" : "GPU", h.terms_resident, h.terms_total, (unsigned long long)h.bytes_resident,
           (unsigned long long)h.index_bytes, (unsigned long long)h.queries_not_resident);
    assert_true(h.queries_device > 0);
    isn_gpu_close(b);
}

static void test_partial_residency_emulated(void **state) {
    (void)state;
    check_partial_residency(true);
}

static void test_partial_residency_gpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    check_partial_residency(false);
}

/* An injected device error: that batch and the next are answered on the CPU, exactly, and health says why. */
static void check_fault(bool emulate) {
    isn_gpu_backend *b = open_backend(emulate, 0, 0);
    static batch bt;
    char err[256];
    batch_fill(&bt, 32, 10, ISN_MODE_OR);
    isn_gpu_inject_fault(b);
    isn_gpu_batch_stats st;
    assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, &st, err, sizeof err), 0);
    assert_int_equal(batch_check(&bt, 10), 0);
    assert_int_equal(st.cpu_queries, bt.n);
    isn_gpu_health h;
    isn_gpu_health_get(b, &h);
    assert_false(h.healthy);
    assert_non_null(strstr(h.reason, "injected"));
    assert_int_equal(h.device_errors, 1);
    batch_fill(&bt, 16, 100, ISN_MODE_AND);
    assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, NULL, err, sizeof err), 0);
    assert_int_equal(batch_check(&bt, 100), 0);
    isn_gpu_close(b);
}

static void test_fault_emulated(void **state) {
    (void)state;
    check_fault(true);
}

static void test_fault_gpu(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    check_fault(false);
}

/* A candidate buffer too small for k: the overflowing queries are answered on the CPU. */
static void test_candidate_overflow_emulated(void **state) {
    (void)state;
    isn_gpu_backend *b = open_backend(true, 0, 10000);
    static batch bt;
    char err[256];
    batch_fill(&bt, 8, 10000, ISN_MODE_OR);
    assert_int_equal(isn_gpu_search_batch(b, bt.requests, bt.n, NULL, err, sizeof err), 0);
    batch_check(&bt, 10000);
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
    isn_gpu_close(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equality_emulated),          cmocka_unit_test(test_partial_residency_emulated),
        cmocka_unit_test(test_fault_emulated),             cmocka_unit_test(test_candidate_overflow_emulated),
        cmocka_unit_test(test_bad_requests),               cmocka_unit_test(test_equality_gpu),
        cmocka_unit_test(test_partial_residency_gpu),      cmocka_unit_test(test_fault_gpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
