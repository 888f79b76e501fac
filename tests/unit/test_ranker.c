/* Second stage end to end on a tiny two-field index with positions: hand-computed features (term
 * frequencies, proximity, first position, BM25 equal to the first stage's), the registry, ranker files
 * (transforms, the bucket's inclusive lower bound, decision-tree input, unknown features refused), an
 * MLP, a stacked ranker (trees `then mlp`: its load errors, its score by hand), and re-ranking order
 * with both scores. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "index/index.h"
#include "ranking/l2_internal.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"

static char dir[64];
static isn_index *ix;
static isn_searcher *searcher;
static isn_l2_workspace *ws;

/* title, body */
static const char *docs[][2] = {
    {"alpha beta", "gamma alpha x x beta y"},
    {"delta", "beta z z z z z z z z z z alpha"},
    {"alpha", "alpha alpha alpha"},
};

static int setup(void **state) {
    (void)state;
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_fields = 2;
    snprintf(o.fields[0], sizeof o.fields[0], "title");
    snprintf(o.fields[1], sizeof o.fields[1], "body");
    o.analyzer.stem = false;
    o.analyzer.stopwords = false;
    o.positions = true;
    o.progress = false;
    isn_builder *b = isn_builder_new(&o);
    char err[ISN_ERR_LEN];
    for (uint32_t d = 0; d < 3; d++) {
        char id[16];
        snprintf(id, sizeof id, "d%u", d);
        size_t lens[2] = {strlen(docs[d][0]), strlen(docs[d][1])};
        if (isn_builder_add(b, id, docs[d], lens, 0.5f * d, err, sizeof err) != 0)
            return -1;
    }
    snprintf(dir, sizeof dir, "/tmp/isn-test-ranker-XXXXXX");
    if (!mkdtemp(dir) || isn_builder_write(b, dir, NULL, err, sizeof err) != 0)
        return -1;
    isn_builder_free(b);
    ix = isn_index_open(dir, err, sizeof err);
    searcher = ix ? isn_searcher_new(ix) : NULL;
    ws = ix ? isn_l2_workspace_new(ix) : NULL;
    return ws ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    isn_l2_workspace_free(ws);
    isn_searcher_free(searcher);
    isn_index_close(ix);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static float feature(const float *row, const char *name) {
    uint32_t id;
    if (!isn_feature_lookup(isn_index_get_info(ix), name, &id))
        fail_msg("no feature %s", name);
    return row[id];
}

static void test_registry(void **state) {
    (void)state;
    const isn_index_info *info = isn_index_get_info(ix);
    uint32_t n = isn_feature_count(info), id;
    char name[128];
    assert_true(n >= 30);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(isn_feature_name(info, i, name, sizeof name));
        assert_true(isn_feature_lookup(info, name, &id));
        assert_int_equal(id, i);
    }
    assert_false(isn_feature_name(info, n, name, sizeof name));
    assert_false(isn_feature_lookup(info, "no_such_feature", &id));
    assert_true(isn_feature_lookup(info, "body.min_window", &id));
}

static void test_features(void **state) {
    (void)state;
    isn_query q;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(searcher, "alpha beta nothere", 18, &q, err, sizeof err), 0);
    uint32_t nf = isn_feature_count(isn_index_get_info(ix));
    uint32_t cand[3] = {2, 0, 1}; /* any order */
    float *f = calloc(3 * nf, sizeof *f);
    assert_int_equal(isn_features_extract(ws, &q, 0, cand, 3, f, err, sizeof err), 0);
    const float *d0 = f + 1 * nf, *d1 = f + 2 * nf, *d2 = f;
    assert_float_equal(feature(d0, "tf_sum"), 4, 0);      /* alpha 2, beta 2 */
    assert_float_equal(feature(d0, "matched_terms"), 2, 0);
    assert_float_equal(feature(d0, "query_terms"), 3, 0);
    assert_float_equal(feature(d0, "matched_frac"), 2.0 / 3, 1e-6);
    assert_float_equal(feature(d0, "title.min_window"), 2, 0); /* "alpha beta" */
    assert_float_equal(feature(d0, "body.min_window"), 4, 0);  /* alpha(1) .. beta(4) */
    assert_float_equal(feature(d0, "min_window"), 2, 0);
    assert_float_equal(feature(d0, "adjacent_pairs"), 1, 0);
    assert_float_equal(feature(d0, "body.ordered_pairs"), 1, 0);
    assert_float_equal(feature(d0, "body.first_pos"), 1, 0);
    assert_float_equal(feature(d0, "title.first_pos"), 0, 0);
    assert_float_equal(feature(d1, "body.ordered_pairs"), 0, 0); /* beta before alpha, 11 apart */
    assert_float_equal(feature(d1, "body.unordered_pairs"), 0, 0);
    assert_float_equal(feature(d1, "body.min_window"), 12, 0);
    assert_float_equal(feature(d1, "title.tf_sum"), 0, 0);
    assert_float_equal(feature(d1, "title.first_pos"), 1, 0); /* field length when absent */
    assert_float_equal(feature(d2, "tf_max"), 4, 0);
    assert_float_equal(feature(d2, "tf_min"), 0, 0);
    assert_float_equal(feature(d2, "body.len"), 3, 0);
    assert_float_equal(feature(d2, "static_score"), isn_index_static_score(ix, 2), 0);
    /* d0: "alpha beta" in the title, alpha(1) .. beta(4) in the body: a run of both; both terms in the
     * lead; the one pair adjacent. d1: beta(0) before alpha(11): no run. d2: alpha alone. */
    assert_float_equal(feature(d0, "longest_run"), 2, 0);
    assert_float_equal(feature(d1, "longest_run"), 1, 0);
    assert_float_equal(feature(d2, "longest_run"), 1, 0);
    assert_float_equal(feature(d0, "lead_matched_frac"), 2.0 / 3, 1e-6);
    assert_float_equal(feature(d2, "lead_matched_frac"), 1.0 / 3, 1e-6);
    assert_float_equal(feature(d0, "adjacent_frac"), 1, 0);
    assert_float_equal(feature(d1, "adjacent_frac"), 0, 0);
    /* ids "d0".."d2": one token each, matching no query term */
    assert_float_equal(feature(d1, "id_len"), 2, 0);
    assert_float_equal(feature(d1, "id_tokens"), 1, 0);
    assert_float_equal(feature(d1, "id_unmatched_tokens"), 1, 0);
    assert_float_equal(feature(d1, "id_matched_frac"), 0, 0);
    /* d2, alpha: idf ln(1 + 0.5 / 3.5); tf 4 without length norm: 4 * 2.2 / (4 + 1.2) -> 0.225976.
     * Weighted BM25F: average lengths title 4/3, body 7, so the title weighs sqrt(7 / (4/3)); tf_bar =
     * 2.2913 * 1 / (0.25 + 0.75 * 0.75) + 3 / (0.25 + 0.75 * 3 / 7) = 8.0701 -> 0.255741. */
    assert_float_equal(feature(d2, "bm25_no_length_norm"), 0.225976, 1e-5);
    assert_float_equal(feature(d2, "bm25f_weighted"), 0.255741, 1e-5);
    /* The bm25 feature is the first stage's score. */
    isn_search_options o;
    isn_search_options_default(&o);
    isn_hit hits[3];
    uint32_t n;
    isn_search_stats st;
    assert_int_equal(isn_search(searcher, &q, &o, hits, &n, &st, err, sizeof err), 0);
    for (uint32_t i = 0; i < n; i++) {
        const float *row = hits[i].doc == 0 ? d0 : hits[i].doc == 1 ? d1 : d2;
        assert_float_equal(feature(row, "bm25"), hits[i].score, 1e-5);
    }
    free(f);
}

static uint64_t double_ulps(double a, double b) {
    int64_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    if (ia < 0) ia = INT64_MIN - ia;
    if (ib < 0) ib = INT64_MIN - ib;
    return ia > ib ? (uint64_t)(ia - ib) : (uint64_t)(ib - ia);
}

/* The logarithms both devices compute alike (feature_rows.h) stay within a few ulps of libm's, over
 * the ranges features and transforms meet, and keep log's edges. */
static void test_device_logarithms(void **state) {
    (void)state;
    uint64_t worst = 0, worst1p = 0;
    double x = 1e-300;
    for (int i = 0; i < 200000; i++, x *= 1.0036) { /* 1e-300 .. ~1e12 */
        uint64_t u = double_ulps(isn_l2_log(x), log(x));
        worst = u > worst ? u : worst;
    }
    for (double y = 1e-12; y < 1e9; y *= 1.0011) {
        uint64_t u = double_ulps(isn_l2_log1p(y), log1p(y));
        worst1p = u > worst1p ? u : worst1p;
    }
    if (worst > 4 || worst1p > 8) fail_msg("isn_l2_log %llu ulps, isn_l2_log1p %llu ulps from libm", (unsigned long long)worst,
                                            (unsigned long long)worst1p);
    assert_true(isn_l2_log(1.0) == 0.0);
    assert_true(isinf(isn_l2_log(0.0)) && isn_l2_log(0.0) < 0);
    assert_true(isnan(isn_l2_log(-1.0)));
    assert_true(isn_l2_log1p(0.0) == 0.0);
}

/* The id as a text stream: tokens split at punctuation and case folded; a token matches a term when one
 * is a prefix of the other, the shorter of 3 bytes or more, or when they are equal. */
static void test_id_match(void **state) {
    (void)state;
    l2_id_term terms[3] = {{"develop", 7}, {"fiber", 5}, {"x", 1}};
    l2_id_hits hits;
    l2_id_match("libboost-Fiber-dev", 18, terms, 3, &hits);
    assert_int_equal(hits.tokens, 3);
    assert_int_equal(hits.unmatched_tokens, 1); /* libboost */
    assert_int_equal(hits.matched_terms, 2);    /* fiber, develop (by "dev") */
    l2_id_match("de.x", 4, terms, 3, &hits);    /* "de" is too short to match as a prefix; "x" is equal */
    assert_int_equal(hits.tokens, 2);
    assert_int_equal(hits.unmatched_tokens, 1);
    assert_int_equal(hits.matched_terms, 1);
    l2_id_match("--", 2, terms, 3, &hits);
    assert_int_equal(hits.tokens, 0);
    assert_int_equal(hits.matched_terms, 0);
}

/* The gather's radix sort orders keys as the heapsort does: random keys, keys sharing all but one
 * byte, doc ids shifted over candidate numbers as the gather builds them, and the smallest inputs. */
static void test_radix_sort(void **state) {
    (void)state;
    enum { N = 5000 };
    static uint64_t a[N], b[N], scratch[N];
    uint64_t x = 88172645463325252ull;
    for (int kind = 0; kind < 4; kind++) {
        for (size_t n = 0; n <= N; n = n < 3 ? n + 1 : n * 3 + 1) {
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                a[i] = kind == 0   ? x
                       : kind == 1 ? 0x0123456700000000ull | (x & 0xFF0000u)
                       : kind == 2 ? (x % 70000) << 32 | i
                                   : 42;
            }
            memcpy(b, a, n * sizeof *a);
            l2_sort_u64(a, n);
            l2_sort_u64_radix(b, scratch, n);
            if (n) assert_memory_equal(a, b, n * sizeof *a);
        }
    }
}

static isn_ranker *load_ranker(const char *text, char *err) {
    char path[128], cwd[512], model[700];
    snprintf(path, sizeof path, "%s/r.ranker", dir);
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(model, sizeof model, text, cwd);
    assert_int_equal(support_write_text(path, model), 0);
    return isn_ranker_load(path, isn_index_get_info(ix), err, ISN_ERR_LEN);
}

static void test_ranker_transforms(void **state) {
    (void)state;
    char err[ISN_ERR_LEN];
    /* tiny_xgb: f0 < 0.5 -> 1.75; else f1 < 2 -> 10.75 else 20.75. */
    isn_ranker *r = load_ranker("isn-ranker 1\nname t\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\n"
                                "input tf_sum bucket 1 3   # 0 below 1, 1 for [1,3), 2 from 3\n"
                                "input tree 3\nsplit body.len 4 1 2\nleaf 0\nleaf 5\n", err);
    if (r == NULL)
        fail_msg("%s", err);
    assert_string_equal(isn_ranker_name(r), "t");
    assert_int_equal(isn_ranker_num_inputs(r), 2);
    const isn_index_info *info = isn_index_get_info(ix);
    uint32_t nf = isn_feature_count(info), tf, len;
    isn_feature_lookup(info, "tf_sum", &tf);
    isn_feature_lookup(info, "body.len", &len);
    float rows[4][128] = {{0}}, in[8];
    rows[0][tf] = 0.99f, rows[1][tf] = 1, rows[2][tf] = 3, rows[3][tf] = 2.5f;
    rows[0][len] = 3, rows[1][len] = 4;
    float flat[4 * 128];
    for (int i = 0; i < 4; i++)
        memcpy(flat + i * nf, rows[i], nf * sizeof(float));
    isn_ranker_transform(r, flat, nf, 4, in);
    const float want[8] = {0, 0, 1, 5, 2, 0, 1, 0};
    for (int i = 0; i < 8; i++)
        assert_float_equal(in[i], want[i], 0);
    isn_ranker_free(r);
}

static void test_ranker_refusals(void **state) {
    (void)state;
    char err[ISN_ERR_LEN];
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\ninput bm25\ninput bm99\n", err));
    assert_non_null(strstr(err, "unknown feature 'bm99'"));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\ninput bm25\n", err));
    assert_non_null(strstr(err, "gives 1 inputs but the model reads 2"));
    /* tiny_lgb names its inputs a and b: neither is a feature. */
    assert_null(load_ranker("isn-ranker 1\nmodel lightgbm %s/tests/data/l2/tiny_lgb.txt\n", err));
    assert_non_null(strstr(err, "'a', an unknown feature"));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\ninput bm25 bucket 3 1\n"
                            "input bm25\n", err));
    assert_non_null(strstr(err, "ascending"));
    assert_null(load_ranker("isn-ranker 2\n%s\n", err));
    assert_non_null(strstr(err, "isn-ranker 1"));
}

static void test_mlp_rerank(void **state) {
    (void)state;
    char err[ISN_ERR_LEN], mlp_path[128];
    /* score = relu(tf_sum - 1) * 2 + 0.5 * relu(-tf_sum + 10) ... with a linear output layer */
    snprintf(mlp_path, sizeof mlp_path, "%s/m.mlp", dir);
    assert_int_equal(support_write_text(mlp_path, "isn-mlp 1\ninputs 2\nlayer 2 relu\n1 0\n0 -1\n-1 0\nlayer 1 linear\n2 1\n0.25\n"), 0);
    isn_ranker *r = load_ranker("isn-ranker 1\nmodel mlp m.mlp\ninput tf_sum\ninput body.len log 1 0\n%.0s", err);
    if (r == NULL)
        fail_msg("%s", err);
    assert_string_equal(isn_ranker_model_kind(r), "mlp");
    isn_query q;
    assert_int_equal(isn_query_parse(searcher, "alpha beta", 10, &q, err, sizeof err), 0);
    isn_hit cand[3] = {{0, 3.0f}, {1, 2.0f}, {2, 1.0f}};
    isn_l2_hit out[3];
    uint32_t n;
    assert_int_equal(isn_rerank(ws, r, &q, 0, cand, 3, 2, NULL, NULL, out, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    /* doc0: tf_sum 4 -> 2*3 = 6.25; doc2: tf 4 -> 6.25 (tie: lower doc first); doc1: tf 2 -> 2.25 */
    assert_int_equal(out[0].doc, 0);
    assert_float_equal(out[0].score, 6.25, 1e-5);
    assert_float_equal(out[0].l1_score, 3.0, 0);
    assert_int_equal(out[1].doc, 2);
    assert_float_equal(out[1].l1_score, 1.0, 0);
    isn_ranker_free(r);
}

/* A stacked ranker's head: 3 inputs (tf_sum, body.len, the trees' score t), hidden h0 = relu(x0 + t - 10),
 * h1 = relu(5 - t), score = h0 + 4 h1 + 0.5. */
static const char *STACKED_HEAD = "isn-mlp 1\ninputs 3\nlayer 2 relu\n1 0 1\n0 0 -1\n-10 5\nlayer 1 linear\n1 4\n0.5\n";

static void write_head(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(support_write_text(path, text), 0);
}

static void test_stacked_ranker_load(void **state) {
    (void)state;
    char err[ISN_ERR_LEN];
    write_head("head.mlp", STACKED_HEAD);
    write_head("narrow.mlp", "isn-mlp 1\ninputs 2\nlayer 1 linear\n1 1\n0\n");
    isn_ranker *r = load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen mlp head.mlp\n"
                                "input tf_sum\ninput body.len\n", err);
    if (r == NULL)
        fail_msg("%s", err);
    assert_string_equal(isn_ranker_model_kind(r), "xgboost+mlp");
    assert_int_equal(isn_ranker_num_trees(r), 2);
    assert_int_equal(isn_ranker_num_inputs(r), 2);
    assert_non_null(isn_ranker_forest(r));
    assert_non_null(isn_ranker_mlp(r));
    isn_ranker_free(r);
    /* each bad case names its problem */
    assert_null(load_ranker("isn-ranker 1\nthen mlp head.mlp\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\n"
                            "input tf_sum\ninput body.len\n", err));
    assert_non_null(strstr(err, "r.ranker:2: 'then' without a first model"));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen mlp head.mlp\n"
                            "then mlp head.mlp\ninput tf_sum\ninput body.len\n", err));
    assert_non_null(strstr(err, "r.ranker:4: a second 'then' line"));
    assert_null(load_ranker("isn-ranker 1\nmodel mlp head.mlp\nthen mlp narrow.mlp\ninput tf_sum\n%.0s", err));
    assert_non_null(strstr(err, "r.ranker:3: 'then' after an MLP"));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen xgboost x.json\n"
                            "input tf_sum\ninput body.len\n", err));
    assert_non_null(strstr(err, "r.ranker:3: expected \"then mlp PATH\""));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen mlp\n"
                            "input tf_sum\ninput body.len\n", err));
    assert_non_null(strstr(err, "expected \"then mlp PATH\""));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen mlp narrow.mlp\n"
                            "input tf_sum\ninput body.len\n", err));
    assert_non_null(strstr(err, "the MLP after 'then' reads 2 inputs, but the ranker gives 2 inputs and the trees' score (3)"));
    assert_null(load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen mlp missing.mlp\n"
                            "input tf_sum\ninput body.len\n", err));
    assert_non_null(strstr(err, "missing.mlp: cannot open"));
}

/* The stacked score is the trees' (tiny_xgb: 1.75, 10.75 or 20.75), then the head over the inputs and
 * that score, computed by hand here; through isn_rerank too. */
static void test_stacked_ranker_score(void **state) {
    (void)state;
    char err[ISN_ERR_LEN];
    write_head("head.mlp", STACKED_HEAD);
    isn_ranker *r = load_ranker("isn-ranker 1\nmodel xgboost %s/tests/data/l2/tiny_xgb.json\nthen mlp head.mlp\n"
                                "input tf_sum\ninput body.len\n", err);
    if (r == NULL)
        fail_msg("%s", err);
    /* rows (x0, x1) -> trees t -> h0, h1 -> score:
     *   (0, 3) -> 1.75  -> 0, 3.25 -> 13.5;  (1, 1) -> 10.75 -> 1.75, 0 -> 2.25;  (1, 5) -> 20.75 -> 11.75, 0 -> 12.25
     * rows 3 floats apart (stride wider than the inputs: the third float is never read) */
    const float rows[3][3] = {{0, 3, 99}, {1, 1, 99}, {1, 5, 99}}, want[3] = {13.5f, 2.25f, 12.25f};
    float *scratch = malloc(isn_ranker_scratch_floats(r, 3) * sizeof(float)), got[3];
    assert_non_null(scratch);
    isn_ranker_predict(r, &rows[0][0], 3, 3, scratch, got);
    for (int i = 0; i < 3; i++)
        if (got[i] != want[i])
            fail_msg("row %d: stacked score %.9g, by hand %.9g", i, got[i], want[i]);
    free(scratch);
    /* doc0 (tf_sum 4, body.len 6), doc1 (2, 12), doc2 (4, 3): trees 20.75 each; h0 = x0 + 10.75, h1 = 0 */
    isn_query q;
    assert_int_equal(isn_query_parse(searcher, "alpha beta", 10, &q, err, sizeof err), 0);
    isn_hit cand[3] = {{0, 3.0f}, {1, 2.0f}, {2, 1.0f}};
    isn_l2_hit out[3];
    uint32_t n;
    assert_int_equal(isn_rerank(ws, r, &q, 0, cand, 3, 3, NULL, NULL, out, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(out[0].doc, 0);
    assert_true(out[0].score == 15.25f);
    assert_int_equal(out[1].doc, 2);
    assert_true(out[1].score == 15.25f);
    assert_int_equal(out[2].doc, 1);
    assert_true(out[2].score == 13.25f);
    isn_ranker_free(r);
}

/* The MLP's AVX2 path (layers of 8 or more outputs) equals its scalar loop bit for bit: widths that are
 * and are not multiples of 16, rows that do not fill the 4-row blocks nor the 64-row chunks, inputs with
 * zeros of both signs and a NaN, and the last input from a column (isn_mlp_predict_last). Where the CPU
 * lacks AVX2 both runs are scalar. */
static void test_mlp_simd_equals_scalar(void **state) {
    (void)state;
    enum { IN = 301, ROWS = 133 };
    char path[128], err[ISN_ERR_LEN];
    snprintf(path, sizeof path, "%s/wide.mlp", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const uint32_t widths[4] = {20, 33, 8, 1};
    uint32_t in = IN, seed = 7;
    fprintf(f, "isn-mlp 1\ninputs %u\n", IN);
    for (int l = 0; l < 4; l++) {
        fprintf(f, "layer %u %s\n", widths[l], l < 3 ? "relu" : "linear");
        for (uint32_t k = 0; k < widths[l] * in + widths[l]; k++) {
            seed = seed * 1103515245u + 12345u;
            fprintf(f, "%.7f ", ((int)(seed >> 16 & 0x7fff) - 16384) / 9000.0);
        }
        fputc('\n', f);
        in = widths[l];
    }
    assert_int_equal(fclose(f), 0);
    isn_mlp *m = isn_mlp_load(path, err, sizeof err);
    if (m == NULL)
        fail_msg("%s", err);
    float *rows = malloc((size_t)ROWS * IN * sizeof(float)), last[ROWS], got[2][2][ROWS];
    float *scratch = malloc(isn_mlp_scratch_floats(m, ROWS) * sizeof(float));
    assert_true(rows && scratch);
    for (uint32_t i = 0; i < ROWS * IN; i++) {
        seed = seed * 1103515245u + 12345u;
        rows[i] = i % 97 == 0 ? -0.0f : i % 89 == 0 ? 0.0f : ((int)(seed >> 16 & 0x7fff) - 16384) / 1000.0f;
    }
    rows[5 * IN + 3] = NAN; /* ReLU keeps a NaN as the scalar loop does (a vector max would make it 0) */
    for (uint32_t r = 0; r < ROWS; r++)
        last[r] = (float)r / 7 - 9;
    for (int scalar = 0; scalar < 2; scalar++) {
        if (scalar)
            setenv("ISN_L2_KERNEL", "scalar", 1);
        isn_mlp_predict(m, rows, ROWS, IN, scratch, got[scalar][0]);
        isn_mlp_predict_last(m, rows, ROWS, IN, last, scratch, got[scalar][1]);
        unsetenv("ISN_L2_KERNEL");
    }
    for (int k = 0; k < 2; k++)
        for (uint32_t r = 0; r < ROWS; r++)
            if (memcmp(&got[0][k][r], &got[1][k][r], sizeof(float)) != 0)
                fail_msg("%s row %u: default path %.9g, scalar %.9g", k ? "last column" : "rows", r, got[0][k][r],
                         got[1][k][r]);
    uint32_t differ = 0; /* the column is read: the two calls give other numbers */
    for (uint32_t r = 0; r < ROWS; r++)
        differ += got[0][0][r] != got[0][1][r];
    assert_true(differ > ROWS / 2);
    free(rows);
    free(scratch);
    isn_mlp_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_id_match),
        cmocka_unit_test(test_radix_sort),
        cmocka_unit_test(test_device_logarithms),
        cmocka_unit_test(test_ranker_transforms),
        cmocka_unit_test(test_ranker_refusals),
        cmocka_unit_test(test_mlp_rerank),
        cmocka_unit_test(test_stacked_ranker_load),
        cmocka_unit_test(test_stacked_ranker_score),
        cmocka_unit_test(test_mlp_simd_equals_scalar),
    };
    return cmocka_run_group_tests_name("ranker", tests, setup, teardown);
}
