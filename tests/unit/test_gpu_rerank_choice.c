/* The re-ranking device choice (gpu.h isn_gpu_rerank): without a GPU every call runs on the CPU and
 * re-ranks exactly as isn_rerank does; the choice tries an unmeasured device (the GPU first), then
 * keeps the faster one for calls of that size, explores the other every 32nd call (rarer when the other
 * is much slower: exploring costs at most 5% of the time), and learns each
 * size apart; a failed GPU pass is re-run on the CPU inside and counted (with the no-GPU backend, where
 * every pass fails). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu/gpu.h"
#include "index/index.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"

static char dir[64];
static isn_index *ix;
static isn_ranker *ranker;

static uint64_t rng = 7;
static uint32_t rnd(uint32_t bound) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % bound;
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/isn-test-rerank-choice-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_fields = 2;
    snprintf(o.fields[0], sizeof o.fields[0], "title");
    snprintf(o.fields[1], sizeof o.fields[1], "body");
    o.progress = false;
    isn_builder *b = isn_builder_new(&o);
    char err[ISN_ERR_LEN], text[2][512], id[32];
    for (uint32_t d = 0; d < 400; d++) {
        for (int f = 0; f < 2; f++) {
            size_t at = 0;
            for (uint32_t w = 0, n = f ? 30 + rnd(40) : 2 + rnd(5); w < n; w++)
                at += (size_t)snprintf(text[f] + at, sizeof text[f] - at, "w%u ", rnd(1 + rnd(60)));
        }
        snprintf(id, sizeof id, "d%u", d);
        const char *fields[2] = {text[0], text[1]};
        size_t lens[2] = {strlen(text[0]), strlen(text[1])};
        if (isn_builder_add(b, id, fields, lens, 0, err, sizeof err) != 0) return -1;
    }
    if (isn_builder_write(b, dir, NULL, err, sizeof err) != 0) return -1;
    isn_builder_free(b);
    ix = isn_index_open(dir, err, sizeof err);
    if (!ix) return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/r.ranker", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "isn-ranker 1\nname r\nmodel mlp r.mlp\ninput bm25\ninput title.bm25 log 1 0\ninput longest_run\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/r.mlp", dir);
    f = fopen(path, "w");
    fprintf(f, "isn-mlp 1\ninputs 3\nlayer 1 linear\n1 0.5 0.25\n0\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/r.ranker", dir);
    ranker = isn_ranker_load(path, isn_index_get_info(ix), err, sizeof err);
    return ranker ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    isn_ranker_free(ranker);
    isn_index_close(ix);
    return support_remove_tree(dir);
}

/* Every query re-ranked through the chooser equals isn_rerank on the CPU, hit for hit. */
static void rerank_matches_cpu(isn_gpu_rerank *choice) {
    isn_searcher *s = isn_searcher_new(ix);
    isn_l2_workspace *ws = isn_l2_workspace_new(ix);
    isn_hit hits[200];
    isn_l2_hit a[20], b[20];
    char err[ISN_ERR_LEN];
    for (uint32_t q = 0; q < 30; q++) {
        char text[64];
        snprintf(text, sizeof text, "w%u w%u w%u", rnd(20), rnd(40), rnd(60));
        isn_query query;
        assert_int_equal(isn_query_parse(s, text, strlen(text), &query, err, sizeof err), 0);
        isn_search_options o;
        isn_search_options_default(&o);
        o.k = 200;
        uint32_t n = 0, na = 0, nb = 0;
        isn_search_stats st;
        assert_int_equal(isn_search(s, &query, &o, hits, &n, &st, err, sizeof err), 0);
        assert_int_equal(isn_rerank(ws, ranker, &query, 0, hits, n, 20, NULL, NULL, a, &na, err, sizeof err), 0);
        if (isn_rerank_stage(ws, ranker, &query, 0, hits, n, 20, isn_gpu_rerank_score, choice, b, &nb, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(na, nb);
        for (uint32_t i = 0; i < na; i++) {
            assert_int_equal(a[i].doc, b[i].doc);
            assert_memory_equal(&a[i].score, &b[i].score, sizeof(float));
        }
    }
    isn_l2_workspace_free(ws);
    isn_searcher_free(s);
}

static void test_cpu_only(void **state) {
    (void)state;
    isn_gpu_rerank *choice = isn_gpu_rerank_new(NULL);
    assert_int_equal(isn_gpu_rerank_choose(choice, ranker, 1000), 0);
    rerank_matches_cpu(choice);
    isn_gpu_rerank_stats st;
    isn_gpu_rerank_stats_get(choice, &st);
    assert_int_equal(st.gpu_calls, 0);
    assert_true(st.cpu_calls >= 25); /* queries without candidates never reach the scorer */
    assert_int_equal(isn_gpu_rerank_last_device(), 0);
    isn_gpu_rerank_free(choice);
}

/* The learning alone: the handle is never used by choose and record, so any non-NULL one will do. */
static void test_learns_the_faster_device_per_size(void **state) {
    (void)state;
    isn_gpu_rerank *choice = isn_gpu_rerank_new((isn_gpu_l2 *)&dir);
    assert_int_equal(isn_gpu_rerank_choose(choice, ranker, 1000), 1); /* nothing measured: the GPU first */
    assert_true(isn_gpu_rerank_expected_ms(choice, ranker, 1000) == 0.0);
    isn_gpu_rerank_record(choice, ranker, 1000, 1, 1.5);
    assert_true(fabs(isn_gpu_rerank_expected_ms(choice, ranker, 1000) - 1.5) < 1e-6);
    assert_int_equal(isn_gpu_rerank_choose(choice, ranker, 1000), 0); /* then the unmeasured CPU */
    isn_gpu_rerank_record(choice, ranker, 1000, 0, 1.0);
    /* the scheduler is told the faster device's time, the one calls of this size run on */
    assert_true(fabs(isn_gpu_rerank_expected_ms(choice, ranker, 1000) - 1.0) < 1e-6);
    assert_true(isn_gpu_rerank_expected_ms(choice, ranker, 10) == 0.0);
    uint32_t gpu = 0;
    for (int i = 0; i < 64; i++) gpu += isn_gpu_rerank_choose(choice, ranker, 1000) == 1;
    assert_int_equal(gpu, 2); /* the CPU is faster; every 32nd call explores the GPU */
    for (int i = 0; i < 40; i++) isn_gpu_rerank_record(choice, ranker, 1000, 1, 0.1);
    gpu = 0;
    for (int i = 0; i < 400; i++) gpu += isn_gpu_rerank_choose(choice, ranker, 1000) == 1;
    assert_int_equal(gpu, 398); /* now the GPU; the CPU, 10 times slower, explored every 200th call */
    /* a CPU 200 times slower: one call in 4,000 */
    for (int i = 0; i < 40; i++) isn_gpu_rerank_record(choice, ranker, 1000, 0, 20.0);
    gpu = 0;
    for (int i = 0; i < 4000; i++) gpu += isn_gpu_rerank_choose(choice, ranker, 1000) == 1;
    assert_int_equal(gpu, 3999);
    /* a GPU pass that failed sets the GPU's time very long: the GPU is still retried, one call in 4,096 */
    isn_gpu_rerank_record(choice, ranker, 1000, 1, 1e9);
    gpu = 0;
    for (int i = 0; i < 8192; i++) gpu += isn_gpu_rerank_choose(choice, ranker, 1000) == 1;
    assert_int_equal(gpu, 2);
    /* another size is learned apart: 10 candidates has measured nothing */
    assert_int_equal(isn_gpu_rerank_choose(choice, ranker, 10), 1);
    isn_gpu_rerank_stats st;
    isn_gpu_rerank_stats_get(choice, &st);
    assert_int_equal(st.explored, 7);
    isn_gpu_rerank_free(choice);
}

/* With the no-GPU backend every pass fails: each call re-runs on the CPU, counted, and the answers are
 * the CPU's. (A CUDA build would dereference the stand-in handle, so it runs this only without CUDA.) */
static void test_gpu_failure_falls_back_to_cpu(void **state) {
    (void)state;
    if (strcmp(isn_gpu_backend_name(), "none") != 0) {
        printf("test_gpu_failure_falls_back_to_cpu: skipped: the %s backend (the CPU-only build, make CUDA=0, runs it)\n",
               isn_gpu_backend_name());
        return;
    }
    isn_gpu_rerank *choice = isn_gpu_rerank_new((isn_gpu_l2 *)&dir);
    rerank_matches_cpu(choice);
    isn_gpu_rerank_stats st;
    isn_gpu_rerank_stats_get(choice, &st);
    assert_true(st.gpu_failures >= 1);
    assert_int_equal(st.gpu_calls, 0);
    assert_int_equal(isn_gpu_rerank_last_device(), 0);
    isn_gpu_rerank_free(choice);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_only),
        cmocka_unit_test(test_learns_the_faster_device_per_size),
        cmocka_unit_test(test_gpu_failure_falls_back_to_cpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
