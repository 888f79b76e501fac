/* Tree ensembles: hand-checked split semantics of both formats (XGBoost's x < t, LightGBM's x <= t in
 * double, missing values and default directions, base score), malformed models refused, and the
 * oracle: 10,000 rows through 1,000 trees of depth 6 against XGBoost's own predictions (Debian's
 * python3-xgboost, run once into build/l2-oracle) and against an independent LightGBM evaluator; the
 * scalar, AVX2 and AVX-512 evaluation paths give identical bits (float and double sums, tail groups). */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ranking/ranking.h"

#define DATA "tests/data/l2/"
#define ORACLE_DIR "build/l2-oracle"
#define ORACLE_ROWS 10000
#define ORACLE_FEATURES 12
#define ORACLE_TOLERANCE 1e-5

static isn_forest *load(const char *file, bool xgb) {
    char err[ISN_ERR_LEN];
    isn_forest *f = xgb ? isn_forest_load_xgboost(file, err, sizeof err) : isn_forest_load_lightgbm(file, err, sizeof err);
    if (f == NULL)
        fail_msg("%s: %s", file, err);
    return f;
}

static void expect_scores(isn_forest *f, const float rows[][2], const float *want, uint32_t n) {
    float got[16];
    isn_forest_predict(f, &rows[0][0], n, 2, got);
    for (uint32_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f)
            fail_msg("row %u (%g, %g): got %g, want %g", i, rows[i][0], rows[i][1], got[i], want[i]);
}

static void test_xgboost_semantics(void **state) {
    (void)state;
    isn_forest *f = load(DATA "tiny_xgb.json", true);
    assert_int_equal(isn_forest_num_trees(f), 2);
    assert_int_equal(isn_forest_num_inputs(f), 2);
    /* x == threshold goes right; NaN at the root goes left (default_left), NaN below it right. */
    const float rows[][2] = {{0.5f, 2.0f}, {0.49f, 1.99f}, {NAN, 0}, {1, NAN}, {1, 1.5f}};
    const float want[] = {20.75f, 1.75f, 1.75f, 20.75f, 10.75f};
    expect_scores(f, rows, want, 5);
    isn_forest_free(f);
}

static void test_lightgbm_semantics(void **state) {
    (void)state;
    isn_forest *f = load(DATA "tiny_lgb.txt", false);
    assert_string_equal(isn_forest_input_name(f, 1), "b");
    /* x == threshold goes left; 0.1f is above the double 0.1 so goes right; None: NaN acts as 0;
     * NaN type: NaN takes the default (right); Zero type: 0 and NaN take the default (right). */
    const float rows[][2] = {{0.5f, 0}, {NAN, -2}, {0.6f, 0.1f}, {0.6f, 0.09f}, {0.6f, NAN}, {0.6f, -1}};
    const float want[] = {201, 101, 203, 202, 203, 102};
    expect_scores(f, rows, want, 6);
    isn_forest_free(f);
}

static void expect_refused(const char *file, bool xgb, const char *needle) {
    char err[ISN_ERR_LEN] = "";
    isn_forest *f = xgb ? isn_forest_load_xgboost(file, err, sizeof err) : isn_forest_load_lightgbm(file, err, sizeof err);
    if (f != NULL)
        fail_msg("%s was accepted", file);
    if (strstr(err, needle) == NULL)
        fail_msg("%s: error '%s' does not mention '%s'", file, err, needle);
}

static void test_bad_models_refused(void **state) {
    (void)state;
    expect_refused(DATA "categorical_xgb.json", true, "categorical");
    expect_refused(DATA "cyclic_xgb.json", true, "malformed");
    expect_refused(DATA "tiny_lgb.txt", true, "not valid JSON");
    expect_refused(DATA "tiny_xgb.json", false, "not a LightGBM");
    expect_refused(DATA "no-such-model.txt", false, "cannot open");
}

static void *read_all(const char *path, size_t bytes) {
    FILE *in = fopen(path, "rb");
    void *buf = malloc(bytes);
    if (!in || !buf || fread(buf, 1, bytes, in) != bytes)
        fail_msg("cannot read %zu bytes of %s", bytes, path);
    fclose(in);
    return buf;
}

/* Generated once: the script needs Debian's python3-xgboost (tools/setup-deps.sh installs it). */
static int oracle_setup(void **state) {
    (void)state;
    struct stat st;
    if (stat(ORACLE_DIR "/DONE", &st) == 0)
        return 0;
    const char *python = getenv("ISN_PYTHON");
    if (python == NULL)
        python = stat("/usr/bin/python3", &st) == 0 ? "/usr/bin/python3" : "python3";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s " DATA "make_tree_oracle.py " ORACLE_DIR, python);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_trees: '%s' failed (python3-xgboost and python3-numpy are needed)\n", cmd);
        return -1;
    }
    return 0;
}

static void compare_oracle(const char *model, bool xgb) {
    isn_forest *f = load(model, xgb);
    assert_int_equal(isn_forest_num_trees(f), 1000);
    float *rows = read_all(ORACLE_DIR "/rows.f32", sizeof(float) * ORACLE_ROWS * ORACLE_FEATURES);
    float *got = malloc(sizeof(float) * ORACLE_ROWS);
    isn_forest_predict(f, rows, ORACLE_ROWS, ORACLE_FEATURES, got);
    double worst = 0;
    if (xgb) {
        float *want = read_all(ORACLE_DIR "/xgb_pred.f32", sizeof(float) * ORACLE_ROWS);
        for (int i = 0; i < ORACLE_ROWS; i++)
            worst = fmax(worst, fabs((double)got[i] - want[i]));
        free(want);
    } else {
        double *want = read_all(ORACLE_DIR "/lgb_pred.f64", sizeof(double) * ORACLE_ROWS);
        for (int i = 0; i < ORACLE_ROWS; i++)
            worst = fmax(worst, fabs((double)got[i] - want[i]));
        free(want);
    }
    printf("# %s: largest difference over %d rows: %.3g\n", model, ORACLE_ROWS, worst);
    assert_true(worst <= ORACLE_TOLERANCE);
    free(rows);
    free(got);
    isn_forest_free(f);
}

static void test_xgboost_oracle(void **state) {
    (void)state;
    compare_oracle(ORACLE_DIR "/xgb_model.json", true);
}

static void test_lightgbm_oracle(void **state) {
    (void)state;
    compare_oracle(ORACLE_DIR "/lgb_model.txt", false);
}

/* ------------------------------------------------------------------ evaluation paths agree bit for bit */

static void predict_with(const char *kernel, isn_forest *f, const float *rows, uint32_t n, uint32_t stride, float *out) {
    setenv("ISN_L2_KERNEL", kernel, 1);
    isn_forest_predict(f, rows, n, stride, out);
    unsetenv("ISN_L2_KERNEL");
}

/* Every row count up to a few groups (short tail groups), then all rows: scalar, AVX2 and AVX-512
 * (those this CPU has) give identical bits. */
static void expect_kernels_agree(isn_forest *f, const float *rows, uint32_t n, uint32_t stride) {
    static const char *const kernels[] = {"avx2", "avx512"};
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    const uint32_t counts[] = {1, 7, 31, 32, 33, 63, 64, 65, 100, 511, 512, 513, n};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        uint32_t m = counts[c] < n ? counts[c] : n;
        predict_with("scalar", f, rows, m, stride, want);
        for (int k = 0; k < 2; k++) {
            if (!(k == 0 ? __builtin_cpu_supports("avx2") : __builtin_cpu_supports("avx512f"))) {
                printf("# kernel %s: not on this CPU, skipped\n", kernels[k]);
                continue;
            }
            predict_with(kernels[k], f, rows, m, stride, got);
            for (uint32_t i = 0; i < m; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
                    fail_msg("%s, %u rows: row %u is %.9g, scalar %.9g", kernels[k], m, i, got[i], want[i]);
        }
    }
    free(want);
    free(got);
}

static void test_kernels_agree_xgboost(void **state) {
    (void)state;
    isn_forest *f = load(ORACLE_DIR "/xgb_model.json", true);
    float *rows = read_all(ORACLE_DIR "/rows.f32", sizeof(float) * ORACLE_ROWS * ORACLE_FEATURES);
    expect_kernels_agree(f, rows, ORACLE_ROWS, ORACLE_FEATURES);
    isn_forest_free(f);
    free(rows);
}

/* A random LightGBM model of depth <= 6 without zero-as-missing (so it takes the SIMD path, summing in
 * double): default directions both ways, NaN and None missing types, thresholds on row values. */
static uint64_t rng_state = 7;
static uint32_t rnd(uint32_t bound) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % bound;
}

static int write_lgb_tree(FILE *out, uint32_t depth, uint32_t *nodes, int32_t *left, int32_t *right, uint32_t *feat,
                          float *thr, uint32_t *dt, uint32_t *leaves, const float *rows) {
    if (depth == 6 || (depth > 1 && rnd(4) == 0))
        return ~(int32_t)(*leaves)++;
    uint32_t i = (*nodes)++;
    feat[i] = rnd(ORACLE_FEATURES);
    float v = rows[rnd(1000) * ORACLE_FEATURES + feat[i]];
    thr[i] = v == v ? v : 0.25f;
    static const uint32_t types[] = {0, 2, 8, 10};
    dt[i] = types[rnd(4)];
    left[i] = write_lgb_tree(out, depth + 1, nodes, left, right, feat, thr, dt, leaves, rows);
    right[i] = write_lgb_tree(out, depth + 1, nodes, left, right, feat, thr, dt, leaves, rows);
    return (int32_t)i;
}

static void test_kernels_agree_lightgbm(void **state) {
    (void)state;
    float *rows = read_all(ORACLE_DIR "/rows.f32", sizeof(float) * ORACLE_ROWS * ORACLE_FEATURES);
    const char *path = ORACLE_DIR "/simd_lgb.txt";
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fprintf(out, "tree\nversion=v3\nnum_class=1\nnum_tree_per_iteration=1\nmax_feature_idx=%d\n\n",
            ORACLE_FEATURES - 1);
    for (int t = 0; t < 300; t++) {
        uint32_t nodes = 0, leaves = 0, feat[64], dt[64];
        int32_t left[64], right[64];
        float thr[64];
        write_lgb_tree(out, 0, &nodes, left, right, feat, thr, dt, &leaves, rows);
        fprintf(out, "Tree=%d\nnum_leaves=%u\nnum_cat=0\nsplit_feature=", t, leaves);
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%u", i ? " " : "", feat[i]);
        fprintf(out, "\nthreshold=");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%.9g", i ? " " : "", thr[i]);
        fprintf(out, "\ndecision_type=");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%u", i ? " " : "", dt[i]);
        fprintf(out, "\nleft_child=");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%d", i ? " " : "", left[i]);
        fprintf(out, "\nright_child=");
        for (uint32_t i = 0; i < nodes; i++) fprintf(out, "%s%d", i ? " " : "", right[i]);
        fprintf(out, "\nleaf_value=");
        for (uint32_t i = 0; i < leaves; i++) fprintf(out, "%s%.17g", i ? " " : "", (double)rnd(1u << 20) / 7e5 - 0.7);
        fprintf(out, "\nshrinkage=1\n\n");
    }
    fprintf(out, "end of trees\n");
    assert_int_equal(fclose(out), 0);
    isn_forest *f = load(path, false);
    expect_kernels_agree(f, rows, ORACLE_ROWS, ORACLE_FEATURES);
    isn_forest_free(f);
    free(rows);
}

int main(void) {
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_xgboost_semantics),
        cmocka_unit_test(test_lightgbm_semantics),
        cmocka_unit_test(test_bad_models_refused),
    };
    const struct CMUnitTest oracle[] = {
        cmocka_unit_test(test_xgboost_oracle),
        cmocka_unit_test(test_lightgbm_oracle),
        cmocka_unit_test(test_kernels_agree_xgboost),
        cmocka_unit_test(test_kernels_agree_lightgbm),
    };
    int failed = cmocka_run_group_tests_name("trees", unit, NULL, NULL);
    failed += cmocka_run_group_tests_name("trees_oracle", oracle, oracle_setup, NULL);
    return failed ? 1 : 0;
}
