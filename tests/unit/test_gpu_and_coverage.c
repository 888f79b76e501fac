/* Conjunctive queries on a pruned-prefix cache (emulated device): a match lies in every list, so when one of a
 * query's lists is resident whole and ends below where its cut lists' resident prefixes end, the device's answer
 * is the whole answer and no CPU completion follows; a query whose lists are all cut is still completed on the
 * CPU, from its submission on (beside the device's part). Every answer is isn_search's. Documents d0..d39999 in
 * input order: "common" in every one, "other" in every second, "rare" in the first 100, and one filler word each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/index_builder.h"

#define NUM_DOCS 40000u
#define RARE_DOCS 100u

static support_index corpus;

static size_t doc_text(void *user, uint32_t d, char *text, size_t cap) {
    (void)user;
    return (size_t)snprintf(text, cap, "common%s%s w%u", d % 2 == 0 ? " other" : "", d < RARE_DOCS ? " rare" : "",
                            d % 50);
}

static void parse(const char *text, isn_query *q, isn_query_term *terms) {
    char err[ISN_ERR_LEN];
    if (isn_query_parse(corpus.searcher, text, strlen(text), q, err, sizeof err) != 0) fail_msg("'%s': %s", text, err);
    memcpy(terms, q->terms, q->num_terms * sizeof *terms);
    q->terms = terms;
}

/* A backend on the emulated device whose budget cuts "common" and "other" to prefixes (the capped admission, half
 * of each logged list) and holds "rare" whole. */
static isn_gpu_backend *open_cache(const isn_query *train, uint32_t num_train) {
    isn_gpu_options o;
    isn_gpu_options_default(&o);
    o.emulate = true;
    o.max_k = 1000;
    o.cpu_threads = 1;
    o.admission = ISN_GPU_ADMIT_CAPPED;
    o.prefix_cap = 0.5;
    o.training_queries = train;
    o.num_training_queries = num_train;
    char err[ISN_ERR_LEN];
    isn_gpu_backend *whole = isn_gpu_open(corpus.index, &o, err, sizeof err);
    if (!whole) fail_msg("isn_gpu_open: %s", err);
    isn_gpu_health h;
    isn_gpu_health_get(whole, &h);
    isn_gpu_close(whole);
    o.memory_budget = h.index_bytes * 35 / 100;
    isn_gpu_backend *b = isn_gpu_open(corpus.index, &o, err, sizeof err);
    if (!b) fail_msg("isn_gpu_open: %s", err);
    isn_gpu_health_get(b, &h);
    assert_true(h.terms_prefix >= 2);
    return b;
}

/* The training log: "rare common", "other common" and the first `extra` of the queries after them. */
static const char *const TRAINING[] = {"rare common", "other common", "other w8"};
static isn_query train[3];
static isn_query_term train_terms[3][4];

static isn_gpu_backend *open_trained(uint32_t extra) {
    for (uint32_t i = 0; i < 2 + extra; i++) parse(TRAINING[i], &train[i], train_terms[i]);
    return open_cache(train, 2 + extra);
}

/* A request's answer must be isn_search's AND answer at its k; returns how many documents that is. */
static uint32_t assert_cpu_answer(const isn_gpu_request *r, const char *text) {
    static isn_hit want[1000];
    isn_search_options so;
    isn_search_options_default(&so);
    so.mode = ISN_MODE_AND;
    so.k = r->k;
    uint32_t n = 0;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_search(corpus.searcher, r->query, &so, want, &n, NULL, err, sizeof err), 0);
    if (r->num_hits != n) fail_msg("'%s' k %u: %u hits, the CPU %u", text, r->k, r->num_hits, n);
    for (uint32_t i = 0; i < n; i++)
        if (r->hits[i].doc != want[i].doc || r->hits[i].score != want[i].score)
            fail_msg("'%s' k %u: rank %u differs from the CPU's", text, r->k, i);
    assert_int_equal(r->answered_by, ISN_GPU_ANSWERED_DEVICE);
    return n;
}

/* One AND query at k on the backend: its answer must be isn_search's; returns the batch's statistics. */
static isn_gpu_batch_stats run_one(isn_gpu_backend *b, const isn_query *q, uint32_t k, const char *text) {
    static isn_hit got[1000];
    isn_gpu_request r = {.query = q, .mode = ISN_MODE_AND, .k = k, .hits = got};
    isn_gpu_batch_stats st;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_gpu_search_batch(b, &r, 1, &st, err, sizeof err), 0);
    assert_cpu_answer(&r, text);
    return st;
}

static void test_a_list_that_ends_early_needs_no_completion(void **state) {
    (void)state;
    isn_gpu_backend *b = open_trained(0);
    static const uint32_t ks[] = {10, 1000};
    for (size_t i = 0; i < 2; i++) {
        const isn_gpu_batch_stats rare = run_one(b, &train[0], ks[i], "rare common");
        const isn_gpu_batch_stats cut = run_one(b, &train[1], ks[i], "other common");
        print_message("k %u: 'rare common' %u completed on the CPU; 'other common' %u\n", ks[i], rare.prefix_queries,
                      cut.prefix_queries);
        assert_int_equal(rare.prefix_queries, 0);
        assert_int_equal(rare.cpu_queries, 0);
        assert_int_equal(cut.prefix_queries, 1);
        /* completed from its submission on, beside the device */
        assert_int_equal(cut.prefix_started_early, 1);
        assert_int_equal(rare.prefix_started_early, 0);
    }
    isn_gpu_close(b);
}

/* Conjunctive completions of different k in one batch, each the CPU's answer: their hits do not share room. "other
 * w8" matches 800 documents (every 50th, all even), many of them past the cut "other"'s prefix, so a top 1,000
 * holds every match, those the CPU completes included. */
static void test_completions_of_different_k_in_one_batch(void **state) {
    (void)state;
    isn_gpu_backend *b = open_trained(1);
    static const uint32_t ks[] = {1000, 10, 1000, 300, 10, 1000};
    enum { N = sizeof ks / sizeof *ks };
    static isn_hit got[N][1000];
    isn_gpu_request r[N];
    for (uint32_t i = 0; i < N; i++)
        r[i] = (isn_gpu_request){.query = &train[2], .mode = ISN_MODE_AND, .k = ks[i], .hits = got[i]};
    isn_gpu_batch_stats st;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_gpu_search_batch(b, r, N, &st, err, sizeof err), 0);
    assert_int_equal(st.prefix_started_early, N);
    for (uint32_t i = 0; i < N; i++) {
        const uint32_t n = assert_cpu_answer(&r[i], "other w8");
        if (ks[i] == 1000) assert_int_equal(n, NUM_DOCS / 50);
    }
    isn_gpu_close(b);
}

static int setup(void **state) {
    (void)state;
    return support_index_build(&corpus, "gpu-and-coverage", NULL, NUM_DOCS, doc_text, NULL);
}

static int teardown(void **state) {
    (void)state;
    support_index_close(&corpus);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_list_that_ends_early_needs_no_completion),
        cmocka_unit_test(test_completions_of_different_k_in_one_batch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
