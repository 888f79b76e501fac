/* Tree ensembles: hand-checked split semantics of both formats (XGBoost's x < t, LightGBM's x <= t in
 * double, missing values and default directions, base score), malformed models refused, and the
 * oracle: 10,000 rows through 1,000 trees of depth 6 against XGBoost's own predictions (Debian's
 * python3-xgboost, run once into build/l2-oracle) and against an independent LightGBM evaluator. */
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

int main(void) {
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_xgboost_semantics),
        cmocka_unit_test(test_lightgbm_semantics),
        cmocka_unit_test(test_bad_models_refused),
    };
    const struct CMUnitTest oracle[] = {
        cmocka_unit_test(test_xgboost_oracle),
        cmocka_unit_test(test_lightgbm_oracle),
    };
    int failed = cmocka_run_group_tests_name("trees", unit, NULL, NULL);
    failed += cmocka_run_group_tests_name("trees_oracle", oracle, oracle_setup, NULL);
    return failed ? 1 : 0;
}
