/* isnd's second stage end to end on a loopback port: a request naming a ranker gets the first
 * stage's best n1 re-ranked, equal (documents, both scores) to the offline engine's isn_rerank and to
 * `isn-query --ranker`; unknown rankers and bad n1 are INVALID_ARGUMENT; SIGHUP with a bad ranker file
 * keeps the old version serving, with a good one switches to it, and a removed file stops serving; a
 * stacked ranker (the trees `then mlp`) added by SIGHUP is served equal to the offline engine. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/isnd_harness.h"
#include "grpc/client.h"

#define NUM_DOCS 2000
#define DEFAULT_N1 200
#define MAX_N1 500

static harness h;
static isn_index *offline_index;
static isn_searcher *offline;
static isn_l2_workspace *offline_l2;
static isn_grpc_client *client;
static char ranker_dir[600], ranker_path[700], model_path[700];

static const char *const QUERIES[] = {
    "wind tunnel", "search engine ranking", "running connection", "boundary layer pressure heat transfer",
    "t5 t17 t300 wind", "latency latency throughput", "score t1", "index query document partition",
};
#define NUM_QUERIES (sizeof QUERIES / sizeof QUERIES[0])

/* A LightGBM model over (title.tf_sum, body.first_pos, bm25): coarse splits and a finer one on BM25,
 * so that re-ranking reorders the first stage. `first_pos_leaves` lets a second version differ. */
static void write_model(const char *first_pos_leaves) {
    FILE *f = fopen(model_path, "w");
    assert_non_null(f);
    fprintf(f, "tree\nversion=v3\nnum_class=1\nnum_tree_per_iteration=1\nmax_feature_idx=2\n"
               "feature_names=title_tf body_first_pos bm25\n\n"
               "Tree=0\nnum_leaves=3\nnum_cat=0\nsplit_feature=0 2\nthreshold=0.5 1.5\ndecision_type=2 2\n"
               "left_child=-1 -2\nright_child=1 -3\nleaf_value=0 1 2\nshrinkage=1\n\n"
               "Tree=1\nnum_leaves=2\nnum_cat=0\nsplit_feature=1\nthreshold=3.5\ndecision_type=2\n"
               "left_child=-1\nright_child=-2\nleaf_value=%s\nshrinkage=1\n\n"
               "Tree=2\nnum_leaves=5\nnum_cat=0\nsplit_feature=2 2 2 2\nthreshold=2 1 3 4.5\n"
               "decision_type=2 2 2 2\nleft_child=1 -1 -3 -4\nright_child=2 -2 3 -5\n"
               "leaf_value=0.1 0.2 0.3 0.4 0.5\nshrinkage=1\n\nend of trees\n",
            first_pos_leaves);
    assert_int_equal(fclose(f), 0);
}

static void write_ranker(const char *path, const char *name, const char *first_input) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "isn-ranker 1\nname %s\nmodel lightgbm model.txt\ninput %s\ninput body.first_pos\ninput bm25\n", name,
            first_input);
    assert_int_equal(fclose(f), 0);
}

/* ------------------------------------------------------------------ comparison */

static isn_ranker *load_offline_ranker(void) {
    char err[ISN_ERR_LEN];
    isn_ranker *r = isn_ranker_load(ranker_path, isn_index_get_info(offline_index), err, sizeof err);
    if (!r) fail_msg("offline ranker: %s", err);
    return r;
}

static void offline_rerank(const isn_ranker *r, const char *text, uint32_t k, uint32_t n1, isn_l2_hit *out,
                           uint32_t *m) {
    isn_search_options o;
    isn_search_options_default(&o);
    o.k = n1 > k ? n1 : k;
    isn_hit *hits = malloc(o.k * sizeof *hits);
    isn_query q;
    uint32_t n;
    assert_int_equal(harness_offline_search(offline, text, &o, &q, hits, &n), 0);
    char err[ISN_ERR_LEN];
    if (isn_rerank(offline_l2, r, &q, 0, hits, n, k, NULL, NULL, out, m, err, sizeof err) != 0) fail_msg("offline: %s", err);
    free(hits);
}

static void served_search(const char *text, uint32_t k, uint32_t n1, const char *ranker, isn_grpc_search_reply *reply) {
    isn_grpc_search_request request = {.query = text, .k = k, .ranker = ranker, .n1 = n1};
    char err[256];
    if (isn_grpc_search(client, &request, reply, err, sizeof err) != 0) fail_msg("search: %s", err);
}

static void assert_served_equals_offline(const isn_ranker *r, const char *text, uint32_t k, uint32_t n1) {
    isn_l2_hit want[100];
    uint32_t m;
    offline_rerank(r, text, k, n1 ? n1 : DEFAULT_N1, want, &m);
    isn_grpc_search_reply reply;
    served_search(text, k, n1, isn_ranker_name(r), &reply);
    if (reply.status != 0) fail_msg("\"%s\": status %d: %s", text, reply.status, reply.message);
    if (reply.num_hits != m) fail_msg("\"%s\" k %u n1 %u: %u hits served, %u offline", text, k, n1, reply.num_hits, m);
    for (uint32_t i = 0; i < m; i++)
        if (reply.hits[i].doc != want[i].doc || reply.hits[i].score != want[i].score ||
            reply.hits[i].l1_score != want[i].l1_score)
            fail_msg("\"%s\" k %u n1 %u hit %u: served doc %u (%g, l1 %g), offline doc %u (%g, l1 %g)", text, k, n1, i,
                     reply.hits[i].doc, reply.hits[i].score, reply.hits[i].l1_score, want[i].doc, want[i].score,
                     want[i].l1_score);
    isn_grpc_search_reply_free(&reply);
}

/* Whether the ranker reorders the first stage for this query (else the test would prove little). */
static bool reorders(const isn_ranker *r, const char *text) {
    isn_l2_hit got[10];
    uint32_t m;
    offline_rerank(r, text, 10, DEFAULT_N1, got, &m);
    for (uint32_t i = 1; i < m; i++)
        if (got[i].l1_score > got[i - 1].l1_score) return true;
    return false;
}

/* ------------------------------------------------------------------ tests */

static void test_rerank_equals_offline(void **state) {
    (void)state;
    isn_ranker *r = load_offline_ranker();
    uint32_t reordered = 0;
    for (size_t q = 0; q < NUM_QUERIES; q++) {
        reordered += reorders(r, QUERIES[q]);
        assert_served_equals_offline(r, QUERIES[q], 10, 0);
        assert_served_equals_offline(r, QUERIES[q], 10, 50);
        assert_served_equals_offline(r, QUERIES[q], 25, MAX_N1);
        assert_served_equals_offline(r, QUERIES[q], 40, 20); /* n1 below k: k candidates */
    }
    assert_true(reordered >= NUM_QUERIES / 2);
    /* Without a ranker: first-stage scores in both fields. */
    isn_grpc_search_reply reply;
    served_search("wind tunnel", 10, 0, NULL, &reply);
    assert_int_equal(reply.status, 0);
    for (uint32_t i = 0; i < reply.num_hits; i++) assert_true(reply.hits[i].score == reply.hits[i].l1_score);
    isn_grpc_search_reply_free(&reply);
    isn_ranker_free(r);
}

/* The served hits equal what `isn-query --ranker FILE` prints (rank, score to 6 decimals, external id). */
static void test_rerank_equals_isn_query(void **state) {
    (void)state;
    for (size_t q = 0; q < 3; q++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s/bin/isn-query --index %s --ranker %s --n1 50 -k 10 \"%s\"", h.build_dir,
                 h.index_dir, ranker_path, QUERIES[q]);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        isn_grpc_search_reply reply;
        served_search(QUERIES[q], 10, 50, "lgb", &reply);
        assert_int_equal(reply.status, 0);
        char line[512];
        uint32_t i = 0;
        while (fgets(line, sizeof line, p)) {
            if (line[0] == '#') continue;
            unsigned rank;
            float score;
            char id[64];
            if (sscanf(line, "%u\t%f\t%63s", &rank, &score, id) != 3) fail_msg("isn-query printed: %s", line);
            if (i >= reply.num_hits) fail_msg("isn-query printed more hits than served: %s", line);
            char served[32];
            snprintf(served, sizeof served, "%.6f", reply.hits[i].score);
            if (rank != i + 1 || strcmp(id, reply.hits[i].external_id) || fabsf(strtof(served, NULL) - score) > 0)
                fail_msg("\"%s\" rank %u: isn-query %s %f, served %s %s", QUERIES[q], i + 1, id, score,
                         reply.hits[i].external_id, served);
            i++;
        }
        assert_int_equal(pclose(p), 0);
        assert_int_equal(i, reply.num_hits);
        isn_grpc_search_reply_free(&reply);
    }
}

static void expect_invalid(const char *ranker, uint32_t n1, const char *needle) {
    isn_grpc_search_reply reply;
    served_search("wind tunnel", 10, n1, ranker, &reply);
    assert_int_equal(reply.status, 3); /* INVALID_ARGUMENT */
    if (!strstr(reply.message, needle)) fail_msg("message \"%s\" lacks \"%s\"", reply.message, needle);
    isn_grpc_search_reply_free(&reply);
}

static void test_bad_requests(void **state) {
    (void)state;
    expect_invalid("no-such-ranker", 0, "unknown ranker \"no-such-ranker\" (served: lgb)");
    expect_invalid("lgb", MAX_N1 + 1, "max_n1");
    expect_invalid(NULL, 100, "without a ranker");
}

static bool wait_log(const char *needle) {
    int64_t deadline = harness_now_ms() + 10000;
    while (harness_now_ms() < deadline) {
        if (harness_log_has(&h, needle)) return true;
        harness_sleep_ms(20);
    }
    harness_dump_log(&h);
    return false;
}

static void test_sighup_reload(void **state) {
    (void)state;
    isn_ranker *v1 = load_offline_ranker();
    /* A bad version (an unknown feature): rejected, the old one keeps serving. */
    write_ranker(ranker_path, "lgb", "no_such_feature");
    kill(h.pid, SIGHUP);
    assert_true(wait_log("SIGHUP: ranker lgb not reloaded"));
    assert_true(wait_log("unknown feature 'no_such_feature'"));
    for (size_t q = 0; q < NUM_QUERIES; q++) assert_served_equals_offline(v1, QUERIES[q], 10, 0);
    /* A good new version: served from then on. */
    write_model("-0.25 0.5");
    write_ranker(ranker_path, "lgb", "title.tf_sum");
    isn_ranker *v2 = load_offline_ranker();
    kill(h.pid, SIGHUP);
    /* The rejected reload above logged "1 rankers serving ... (1 files rejected)" too: wait for this one. */
    assert_true(wait_log("(0 files rejected)"));
    uint32_t differ = 0;
    for (size_t q = 0; q < NUM_QUERIES; q++) {
        assert_served_equals_offline(v2, QUERIES[q], 10, 0);
        isn_l2_hit a[10], b[10];
        uint32_t ma, mb;
        offline_rerank(v1, QUERIES[q], 10, DEFAULT_N1, a, &ma);
        offline_rerank(v2, QUERIES[q], 10, DEFAULT_N1, b, &mb);
        differ += ma && a[0].score != b[0].score;
    }
    assert_true(differ > 0);
    /* A removed file: its ranker is no longer served. */
    char moved[800];
    snprintf(moved, sizeof moved, "%s.off", ranker_path);
    assert_int_equal(rename(ranker_path, moved), 0);
    kill(h.pid, SIGHUP);
    assert_true(wait_log("SIGHUP: 0 rankers serving"));
    expect_invalid("lgb", 0, "unknown ranker");
    assert_int_equal(rename(moved, ranker_path), 0);
    isn_ranker_free(v1);
    isn_ranker_free(v2);
}

/* A bad ranker file at start is a start failure naming the file. */
static void test_bad_file_at_start(void **state) {
    (void)state;
    char bad_dir[700], bad[800];
    snprintf(bad_dir, sizeof bad_dir, "%s/bad-rankers", h.work_dir);
    assert_int_equal(mkdir(bad_dir, 0755), 0);
    snprintf(bad, sizeof bad, "%s/broken.ranker", bad_dir);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fputs("isn-ranker 1\nmodel lightgbm missing.txt\n", f);
    fclose(f);
    harness other;
    memcpy(&other, &h, sizeof other);
    char option[900];
    snprintf(option, sizeof option, "rerank.ranker_dir=%s", bad_dir);
    const char *extra[] = {"--set", option, NULL};
    assert_int_equal(harness_start(&other, NULL, extra), -1);
    assert_true(harness_log_has(&other, "broken.ranker"));
}

/* The stacked ranker's score of one document by hand: its inputs and trees' score t (the trees ranker),
 * then head.mlp below: relu(x2 + 2t) + 0.5 relu(x0 - t + 0.5) + 0.25 relu(-0.25 x1 + t). */
static double stacked_by_hand(const isn_ranker *trees, const char *text, uint32_t doc) {
    isn_search_options o;
    isn_search_options_default(&o);
    o.k = 1;
    isn_hit hit;
    isn_query q;
    uint32_t n;
    char err[ISN_ERR_LEN];
    assert_int_equal(harness_offline_search(offline, text, &o, &q, &hit, &n), 0);
    const uint32_t nf = isn_feature_count(isn_index_get_info(offline_index));
    float *row = malloc(nf * sizeof(float)), x[3], t;
    assert_non_null(row);
    if (isn_features_extract(offline_l2, &q, 0, &doc, 1, row, err, sizeof err) != 0) fail_msg("%s", err);
    isn_ranker_transform(trees, row, nf, 1, x);
    isn_forest_predict(isn_ranker_forest(trees), x, 1, 3, &t);
    free(row);
    const double h0 = fmax(0, x[2] + 2.0 * t), h1 = fmax(0, x[0] - t + 0.5), h2 = fmax(0, -0.25 * x[1] + t);
    return h0 + 0.5 * h1 + 0.25 * h2;
}

/* A stacked ranker (the LightGBM trees, then an MLP over the three inputs and the trees' score) added to
 * the directory: SIGHUP serves it, equal to the offline engine and to its score by hand. */
static void test_stacked_served(void **state) {
    (void)state;
    char head[800], stacked[800], err[ISN_ERR_LEN];
    snprintf(head, sizeof head, "%s/head.mlp", ranker_dir);
    FILE *f = fopen(head, "w");
    assert_non_null(f);
    fputs("isn-mlp 1\ninputs 4\nlayer 3 relu\n0 0 1 2\n1 0 0 -1\n0 -0.25 0 1\n0 0.5 0\n"
          "layer 1 linear\n1 0.5 0.25\n0\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(stacked, sizeof stacked, "%s/stacked.ranker", ranker_dir);
    f = fopen(stacked, "w");
    assert_non_null(f);
    fputs("isn-ranker 1\nname stacked\nmodel lightgbm model.txt\nthen mlp head.mlp\ninput title.tf_sum\n"
          "input body.first_pos\ninput bm25\n", f);
    assert_int_equal(fclose(f), 0);
    kill(h.pid, SIGHUP);
    assert_true(wait_log("SIGHUP: ranker stacked loaded from"));
    assert_true(wait_log("(lightgbm+mlp, 3 trees, 3 inputs)"));
    isn_ranker *r = isn_ranker_load(stacked, isn_index_get_info(offline_index), err, sizeof err);
    if (!r) fail_msg("offline stacked ranker: %s", err);
    isn_ranker *trees = load_offline_ranker();
    uint32_t differ = 0;
    for (size_t q = 0; q < NUM_QUERIES; q++) {
        assert_served_equals_offline(r, QUERIES[q], 10, 0);
        assert_served_equals_offline(r, QUERIES[q], 25, MAX_N1);
        isn_l2_hit a[10], b[10];
        uint32_t ma, mb;
        offline_rerank(r, QUERIES[q], 10, DEFAULT_N1, a, &ma);
        offline_rerank(trees, QUERIES[q], 10, DEFAULT_N1, b, &mb);
        differ += ma && a[0].score != b[0].score;
        isn_grpc_search_reply reply;
        served_search(QUERIES[q], 10, 0, "stacked", &reply);
        assert_int_equal(reply.status, 0);
        for (uint32_t i = 0; i < reply.num_hits; i++) {
            const double want = stacked_by_hand(trees, QUERIES[q], reply.hits[i].doc);
            if (fabs(reply.hits[i].score - want) > 1e-5 * fmax(1, fabs(want)))
                fail_msg("\"%s\" hit %u (doc %u): served %.9g, by hand %.9g", QUERIES[q], i, reply.hits[i].doc,
                         reply.hits[i].score, want);
        }
        isn_grpc_search_reply_free(&reply);
    }
    assert_true(differ > 0);
    isn_ranker_free(trees);
    isn_ranker_free(r);
}

/* ------------------------------------------------------------------ setup */

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, NUM_DOCS);
    snprintf(ranker_dir, sizeof ranker_dir, "%s/rankers", h.work_dir);
    if (mkdir(ranker_dir, 0755) != 0) return -1;
    snprintf(model_path, sizeof model_path, "%s/model.txt", ranker_dir);
    snprintf(ranker_path, sizeof ranker_path, "%s/lgb.ranker", ranker_dir);
    write_model("0.5 -0.25");
    write_ranker(ranker_path, "lgb", "title.tf_sum");
    if (harness_open_offline(&h, &offline_index, &offline) != 0) return -1;
    offline_l2 = isn_l2_workspace_new(offline_index);
    static char dir_option[700], n1_option[64], max_option[64];
    snprintf(dir_option, sizeof dir_option, "rerank.ranker_dir=%s", ranker_dir);
    snprintf(n1_option, sizeof n1_option, "rerank.default_n1=%d", DEFAULT_N1);
    snprintf(max_option, sizeof max_option, "rerank.max_n1=%d", MAX_N1);
    const char *extra[] = {"--set", dir_option, "--set", n1_option, "--set", max_option, NULL};
    client = harness_start_connected(&h, extra, "ranker lgb loaded from");
    return client ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    isn_l2_workspace_free(offline_l2);
    return harness_finish(&h, client, offline_index, offline);
}

/* isn-bench's --ranker: its requests re-rank (the node counts a re-ranking per answer), and a ranker the
 * node lacks makes every request INVALID_ARGUMENT. */
static char bench_out[8192];

static long long bench_status(const char *ranker_args, const char *status) {
    char cmd[2048], queries[700], *out = bench_out;
    out[0] = '\0';
    snprintf(queries, sizeof queries, "%s/bench-queries.tsv", h.work_dir);
    FILE *q = fopen(queries, "w");
    assert_non_null(q);
    for (size_t i = 0; i < NUM_QUERIES; i++) fprintf(q, "%zu\t%s\n", i, QUERIES[i]);
    fclose(q);
    snprintf(cmd, sizeof cmd, "%s/bin/isn-bench --target %s --queries %s --concurrency 2 --duration 0.3 --warmup 0 %s",
             h.build_dir, h.grpc_address, queries, ranker_args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof bench_out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", status);
    const char *at = strstr(out, needle);
    if (!at) fail_msg("isn-bench printed no %s: %s", needle, out);
    return atoll(at + strlen(needle));
}

static void test_bench_rerank(void **state) {
    (void)state;
    long long before = harness_metric(&h, "isn_rerank_device_total{device=\"cpu\"}") +
                       harness_metric(&h, "isn_rerank_device_total{device=\"gpu\"}");
    long long ok = bench_status("--ranker lgb --n1 50", "ok");
    if (ok <= 0) fail_msg("isn-bench: %s", bench_out);
    long long after = harness_metric(&h, "isn_rerank_device_total{device=\"cpu\"}") +
                      harness_metric(&h, "isn_rerank_device_total{device=\"gpu\"}");
    if (after - before < ok) fail_msg("%lld answers, %lld re-rankings", ok, after - before);
    assert_true(bench_status("--ranker nosuch", "invalid_argument") > 0);
    assert_int_equal(bench_status("--ranker nosuch", "ok"), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rerank_equals_offline),
        cmocka_unit_test(test_rerank_equals_isn_query),
        cmocka_unit_test(test_bench_rerank), /* before the reloads change the ranker */
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_sighup_reload),
        cmocka_unit_test(test_bad_file_at_start),
        cmocka_unit_test(test_stacked_served),
    };
    return cmocka_run_group_tests_name("isnd_rerank", tests, setup, teardown);
}
