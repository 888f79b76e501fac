/* The second stage on the GPU equals the CPU bit for bit: generated XGBoost models (float sums, 1,000
 * trees up to depth 6, missing values both ways, x == threshold rows), a LightGBM model (double sums),
 * the XGBoost oracle model of test_trees when it is there, an MLP; small batches (trees split across
 * thread blocks) and large ones (one pass per row), also through the kernel for wide rows; wide models
 * (500 inputs and trees, 1,250 inputs and trees, 2,048 inputs) and deep ones (trees of depth 9 and 10)
 * at 1 to 10,000 rows; the model cache (several resident, LRU eviction, a model above the budget
 * refused, models without a GPU form refused). Without a GPU every test is skipped, saying why. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu/gpu.h"
#include "ranking/ranking.h"

#define FEATURES 12
#define ROWS 20000
#define ORACLE "build/l2-oracle/xgb_model.json"

static char dir[64];
static float *rows;
static isn_gpu_l2 *gpu;
static char no_gpu_reason[256];

static uint64_t rng = 12345;
static uint32_t rnd(uint32_t bound) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % bound;
}

static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 6; i++) s += (float)rnd(1u << 20) / (1u << 20);
    return s - 3.0f;
}

/* ------------------------------------------------------------------ generated models */

typedef struct {
    uint32_t nodes, leaves;
    uint32_t feat[64], dt[64];
    int32_t left[64], right[64];
    float thr[64];
} gen_tree;

/* LightGBM arrays: children >= 0 are nodes, ~j is leaf j. */
static int32_t grow(gen_tree *t, uint32_t depth, uint32_t max_depth) {
    if (depth == max_depth || (depth > 1 && rnd(5) == 0)) return ~(int32_t)t->leaves++;
    uint32_t i = t->nodes++;
    t->feat[i] = rnd(FEATURES);
    float v = rows[rnd(1000) * FEATURES + t->feat[i]];
    t->thr[i] = v == v ? v : 0.5f;
    static const uint32_t types[] = {0, 2, 8, 10};
    t->dt[i] = types[rnd(4)];
    t->left[i] = grow(t, depth + 1, max_depth);
    t->right[i] = grow(t, depth + 1, max_depth);
    return (int32_t)i;
}

static void write_lightgbm(const char *path, uint32_t trees, uint32_t depth) {
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fprintf(out, "tree\nversion=v3\nnum_class=1\nnum_tree_per_iteration=1\nmax_feature_idx=%d\n\n", FEATURES - 1);
    for (uint32_t k = 0; k < trees; k++) {
        gen_tree t = {0};
        grow(&t, 0, depth);
        fprintf(out, "Tree=%u\nnum_leaves=%u\nnum_cat=0\nsplit_feature=", k, t.leaves);
        for (uint32_t i = 0; i < t.nodes; i++) fprintf(out, "%s%u", i ? " " : "", t.feat[i]);
        fprintf(out, "\nthreshold=");
        for (uint32_t i = 0; i < t.nodes; i++) fprintf(out, "%s%.9g", i ? " " : "", t.thr[i]);
        fprintf(out, "\ndecision_type=");
        for (uint32_t i = 0; i < t.nodes; i++) fprintf(out, "%s%u", i ? " " : "", t.dt[i]);
        fprintf(out, "\nleft_child=");
        for (uint32_t i = 0; i < t.nodes; i++) fprintf(out, "%s%d", i ? " " : "", t.left[i]);
        fprintf(out, "\nright_child=");
        for (uint32_t i = 0; i < t.nodes; i++) fprintf(out, "%s%d", i ? " " : "", t.right[i]);
        fprintf(out, "\nleaf_value=");
        for (uint32_t i = 0; i < t.leaves; i++) fprintf(out, "%s%.17g", i ? " " : "", (double)gauss() * 0.1);
        fprintf(out, "\nshrinkage=1\n\n");
    }
    fprintf(out, "end of trees\n");
    assert_int_equal(fclose(out), 0);
}

/* XGBoost JSON: nodes and leaves in one array; a leaf has left = -1 and its value in split_conditions. */
static void write_xgb_node(FILE *out, const gen_tree *t, int32_t ref, int32_t *next, int32_t *lefts, int32_t *rights,
                           float *conds, uint32_t *feats, int *dl, double *leaf_values) {
    int32_t me = (*next)++;
    if (ref < 0) {
        lefts[me] = rights[me] = -1;
        conds[me] = (float)leaf_values[~ref];
        feats[me] = 0;
        dl[me] = 0;
        return;
    }
    feats[me] = t->feat[ref];
    conds[me] = t->thr[ref];
    dl[me] = (t->dt[ref] & 2) != 0;
    lefts[me] = *next;
    write_xgb_node(out, t, t->left[ref], next, lefts, rights, conds, feats, dl, leaf_values);
    rights[me] = *next;
    write_xgb_node(out, t, t->right[ref], next, lefts, rights, conds, feats, dl, leaf_values);
}

static void write_xgboost(const char *path, uint32_t trees, uint32_t depth) {
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fprintf(out, "{\"learner\": {\"feature_names\": [], \"gradient_booster\": {\"name\": \"gbtree\", \"model\": {\"trees\": [");
    for (uint32_t k = 0; k < trees; k++) {
        gen_tree t = {0};
        grow(&t, 0, depth);
        double leaves[64];
        for (uint32_t i = 0; i < t.leaves; i++) leaves[i] = gauss() * 0.1;
        int32_t lefts[128], rights[128], next = 0;
        float conds[128];
        uint32_t feats[128];
        int dl[128];
        write_xgb_node(out, &t, t.nodes ? 0 : ~0, &next, lefts, rights, conds, feats, dl, leaves);
        const char *names[] = {"left_children", "right_children", "split_conditions", "split_indices", "default_left",
                               "split_type"};
        fprintf(out, "%s{", k ? ",\n" : "\n");
        for (int a = 0; a < 6; a++) {
            fprintf(out, "%s\"%s\": [", a ? ", " : "", names[a]);
            for (int32_t i = 0; i < next; i++) {
                fprintf(out, "%s", i ? ", " : "");
                if (a == 0) fprintf(out, "%d", lefts[i]);
                if (a == 1) fprintf(out, "%d", rights[i]);
                if (a == 2) fprintf(out, "%.9g", conds[i]);
                if (a == 3) fprintf(out, "%u", feats[i]);
                if (a == 4) fprintf(out, "%d", dl[i]);
                if (a == 5) fprintf(out, "0");
            }
            fprintf(out, "]");
        }
        fprintf(out, "}");
    }
    fprintf(out, "]}},\n \"learner_model_param\": {\"base_score\": \"3E-1\", \"num_class\": \"0\", \"num_feature\": \"%d\"},"
                 " \"objective\": {\"name\": \"reg:squarederror\"}}, \"version\": [1, 7, 4]}\n", FEATURES);
    assert_int_equal(fclose(out), 0);
}

static isn_forest *load_forest(const char *path, bool xgb) {
    char err[ISN_ERR_LEN];
    isn_forest *f = xgb ? isn_forest_load_xgboost(path, err, sizeof err) : isn_forest_load_lightgbm(path, err, sizeof err);
    if (!f) fail_msg("%s: %s", path, err);
    return f;
}

/* ------------------------------------------------------------------ comparison */

static void expect_equal(const char *what, const float *cpu, const float *dev, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (memcmp(&cpu[i], &dev[i], sizeof(float)) != 0)
            fail_msg("%s: row %u: GPU %.9g, CPU %.9g", what, i, dev[i], cpu[i]);
}

/* Row counts that take the tree-split path (small) and the one-pass path (large), with a stride wider
 * than the model's inputs. */
static void expect_forest_equal_on(isn_gpu_l2 *g, const char *what, const isn_forest *f) {
    const uint32_t stride = FEATURES + 3;
    float *wide = malloc(sizeof(float) * ROWS * stride), *cpu = malloc(sizeof(float) * ROWS), *dev = malloc(sizeof(float) * ROWS);
    for (uint32_t r = 0; r < ROWS; r++)
        for (uint32_t c = 0; c < stride; c++) wide[r * stride + c] = c < FEATURES ? rows[r * FEATURES + c] : NAN;
    isn_forest_predict(f, wide, ROWS, stride, cpu);
    const uint32_t counts[] = {1, 37, 1000, 4096, ROWS};
    char err[ISN_ERR_LEN], label[128];
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        isn_gpu_l2_stats st;
        memset(dev, 0, sizeof(float) * ROWS);
        if (isn_gpu_l2_score_forest(g, f, wide, counts[c], stride, dev, &st, err, sizeof err) != 0)
            fail_msg("%s: %s", what, err);
        snprintf(label, sizeof label, "%s, %u rows, %u tree groups", what, counts[c], st.tree_splits);
        expect_equal(label, cpu, dev, counts[c]);
        printf("# %s: equal\n", label);
    }
    free(wide);
    free(cpu);
    free(dev);
}

/* Automatic, never and always splitting the trees across thread blocks; the rows in one chunk or in
 * several chunks over two streams (counts of rows that do not divide evenly included). */
static void expect_forest_equal(const char *what, const isn_forest *f) {
    const uint32_t splits[] = {1, UINT32_MAX, 0, 0}, chunks[] = {1, 3, 8, 2};
    char err[ISN_ERR_LEN], label[160];
    expect_forest_equal_on(gpu, what, f);
    for (int m = 0; m < 4; m++) {
        isn_gpu_l2_options o;
        isn_gpu_l2_options_default(&o);
        o.split_below_rows = splits[m];
        o.overlap_chunks = chunks[m];
        isn_gpu_l2 *g = isn_gpu_l2_open(&o, err, sizeof err);
        if (!g) fail_msg("%s", err);
        snprintf(label, sizeof label, "%s (split %s, %u chunks)", what,
                 splits[m] == 1 ? "never" : splits[m] ? "always" : "auto", chunks[m]);
        expect_forest_equal_on(g, label, f);
        isn_gpu_l2_close(g);
    }
    /* The kernel for wide rows (warps splitting the trees) takes these narrow models too when asked. */
    setenv("ISN_GPU_TREE_WARPS_ABOVE_INPUTS", "0", 1);
    isn_gpu_l2_options o;
    isn_gpu_l2_options_default(&o);
    isn_gpu_l2 *g = isn_gpu_l2_open(&o, err, sizeof err);
    unsetenv("ISN_GPU_TREE_WARPS_ABOVE_INPUTS");
    if (!g) fail_msg("%s", err);
    snprintf(label, sizeof label, "%s (trees split between warps)", what);
    expect_forest_equal_on(g, label, f);
    isn_gpu_l2_close(g);
}

/* Writes a generated model of `trees` trees of depth 6 to dir/file and loads it (so the generator is
 * checked even without a GPU); with a GPU, the device must score it as the CPU does. */
static void expect_generated_forest_equal(const char *what, const char *file, bool xgboost, uint32_t trees) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    (xgboost ? write_xgboost : write_lightgbm)(path, trees, 6);
    isn_forest *f = load_forest(path, xgboost);
    if (!gpu) {
        isn_forest_free(f);
        skip();
    }
    expect_forest_equal(what, f);
    isn_forest_free(f);
}

static void test_xgboost_models(void **state) {
    (void)state;
    expect_generated_forest_equal("generated XGBoost, 1000 trees", "gen_xgb.json", true, 1000);
    struct stat st;
    if (stat(ORACLE, &st) != 0) {
        printf("# %s missing (build/tests/test_trees makes it): oracle model not compared\n", ORACLE);
        return;
    }
    isn_forest *f = load_forest(ORACLE, true);
    expect_forest_equal("XGBoost oracle model", f);
    isn_forest_free(f);
}

static void test_lightgbm_model(void **state) {
    (void)state;
    expect_generated_forest_equal("generated LightGBM, 500 trees (double sums)", "gen_lgb.txt", false, 500);
}

static void test_mlp(void **state) {
    (void)state;
    if (!gpu) skip();
    char path[128], err[ISN_ERR_LEN];
    snprintf(path, sizeof path, "%s/m.mlp", dir);
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    const uint32_t widths[] = {FEATURES, 67, 33, 1};
    fprintf(out, "isn-mlp 1\ninputs %d\n", FEATURES);
    for (int l = 1; l < 4; l++) {
        fprintf(out, "layer %u %s\n", widths[l], l < 3 ? "relu" : "linear");
        for (uint32_t i = 0; i < widths[l] * widths[l - 1] + widths[l]; i++) fprintf(out, "%.9g ", gauss() * 0.3);
        fprintf(out, "\n");
    }
    assert_int_equal(fclose(out), 0);
    isn_mlp *m = isn_mlp_load(path, err, sizeof err);
    if (!m) fail_msg("%s", err);
    /* NaN-free rows: an MLP has no missing-value rule. */
    float *clean = malloc(sizeof(float) * ROWS * FEATURES), *cpu = malloc(sizeof(float) * ROWS), *dev = malloc(sizeof(float) * ROWS);
    for (uint32_t i = 0; i < ROWS * FEATURES; i++) clean[i] = rows[i] == rows[i] ? rows[i] : 0.0f;
    float *scratch = malloc(sizeof(float) * isn_mlp_scratch_floats(m, ROWS));
    isn_mlp_predict(m, clean, ROWS, FEATURES, scratch, cpu);
    if (isn_gpu_l2_score_mlp(gpu, m, clean, ROWS, FEATURES, dev, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    expect_equal("MLP 12-67-33-1", cpu, dev, ROWS);
    free(clean);
    free(cpu);
    free(dev);
    free(scratch);
    isn_mlp_free(m);
}

/* ------------------------------------------------------------------ wide and deep models */

typedef struct {
    int32_t *left, *right;
    float *cond;
    uint32_t *feat;
    int *default_left;
    int32_t next;
} xgb_nodes;

/* A node and its subtree, in XGBoost's preorder; leaves come early at random below level 2, except on
 * the leftmost path, which reaches `depth`. Thresholds are values of the rows (so x == threshold
 * happens), missing values go either way. */
static int32_t random_node(xgb_nodes *a, const float *x, uint32_t num_rows, uint32_t width, uint32_t inputs, uint32_t level,
                           uint32_t depth, bool spine) {
    const int32_t me = a->next++;
    if (level == depth || (!spine && level > 2 && rnd(6) == 0)) {
        a->left[me] = a->right[me] = -1;
        a->cond[me] = gauss() * 0.1f;
        a->feat[me] = 0;
        a->default_left[me] = 0;
        return me;
    }
    const uint32_t f = rnd(inputs);
    const float v = x[(size_t)rnd(num_rows) * width + f];
    a->feat[me] = f;
    a->cond[me] = v == v ? v : 0.5f;
    a->default_left[me] = (int)rnd(2);
    a->left[me] = random_node(a, x, num_rows, width, inputs, level + 1, depth, spine);
    a->right[me] = random_node(a, x, num_rows, width, inputs, level + 1, depth, false);
    return me;
}

/* XGBoost JSON of `trees` trees of up to `depth` levels on `inputs` inputs, thresholds from rows x
 * (width floats apart). */
static void write_random_xgboost(const char *path, const float *x, uint32_t num_rows, uint32_t width, uint32_t inputs,
                                 uint32_t trees, uint32_t depth) {
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    const size_t most = ((size_t)2 << depth) - 1;
    xgb_nodes a = {malloc(most * sizeof(int32_t)), malloc(most * sizeof(int32_t)), malloc(most * sizeof(float)),
                   malloc(most * sizeof(uint32_t)), malloc(most * sizeof(int)), 0};
    fprintf(out, "{\"learner\": {\"feature_names\": [], \"gradient_booster\": {\"name\": \"gbtree\", \"model\": {\"trees\": [");
    for (uint32_t k = 0; k < trees; k++) {
        a.next = 0;
        random_node(&a, x, num_rows, width, inputs, 0, depth, true);
        fprintf(out, "%s{\"left_children\": [", k ? ",\n" : "\n");
        for (int32_t i = 0; i < a.next; i++) fprintf(out, "%s%d", i ? "," : "", a.left[i]);
        fprintf(out, "], \"right_children\": [");
        for (int32_t i = 0; i < a.next; i++) fprintf(out, "%s%d", i ? "," : "", a.right[i]);
        fprintf(out, "], \"split_conditions\": [");
        for (int32_t i = 0; i < a.next; i++) fprintf(out, "%s%.9g", i ? "," : "", (double)a.cond[i]);
        fprintf(out, "], \"split_indices\": [");
        for (int32_t i = 0; i < a.next; i++) fprintf(out, "%s%u", i ? "," : "", a.feat[i]);
        fprintf(out, "], \"default_left\": [");
        for (int32_t i = 0; i < a.next; i++) fprintf(out, "%s%d", i ? "," : "", a.default_left[i]);
        fprintf(out, "], \"split_type\": [");
        for (int32_t i = 0; i < a.next; i++) fprintf(out, "%s0", i ? "," : "");
        fprintf(out, "]}");
    }
    fprintf(out, "]}},\n \"learner_model_param\": {\"base_score\": \"3E-1\", \"num_class\": \"0\", \"num_feature\": \"%u\"},"
                 " \"objective\": {\"name\": \"reg:squarederror\"}}, \"version\": [1, 7, 4]}\n", inputs);
    assert_int_equal(fclose(out), 0);
    free(a.left), free(a.right), free(a.cond), free(a.feat), free(a.default_left);
}

#define WIDE_ROWS 10000u

/* Rows of `inputs` values (stride inputs + 3, the rest NaN): small integers in every third input (so
 * thresholds are hit exactly), else Gaussian; one in twenty missing. */
static float *wide_rows(uint32_t inputs, uint32_t num_rows) {
    const uint32_t stride = inputs + 3;
    float *x = malloc(sizeof(float) * num_rows * stride);
    assert_non_null(x);
    for (uint32_t r = 0; r < num_rows; r++)
        for (uint32_t c = 0; c < stride; c++) {
            float v = c >= inputs ? NAN : c % 3 == 0 ? (float)rnd(6) : gauss();
            if (c < inputs && rnd(20) == 0) v = NAN;
            x[(size_t)r * stride + c] = v;
        }
    return x;
}

/* A generated model of `inputs` inputs scored on the GPU at 1, 33, 1,000 and 10,000 rows with tree
 * splitting automatic, never and always, and in three chunks over two streams: every score equal to
 * the CPU's bit for bit. */
static void expect_wide_forest_equal(uint32_t inputs, uint32_t trees, uint32_t depth) {
    if (!gpu) skip();
    char path[128], what[96], err[ISN_ERR_LEN], label[192];
    snprintf(path, sizeof path, "%s/wide_%u_%u_%u.json", dir, inputs, trees, depth);
    snprintf(what, sizeof what, "%u inputs, %u trees of depth %u", inputs, trees, depth);
    const uint32_t stride = inputs + 3;
    float *x = wide_rows(inputs, WIDE_ROWS);
    write_random_xgboost(path, x, WIDE_ROWS, stride, inputs, trees, depth);
    isn_forest *f = load_forest(path, true);
    float *cpu = malloc(sizeof(float) * WIDE_ROWS), *dev = malloc(sizeof(float) * WIDE_ROWS);
    isn_forest_predict(f, x, WIDE_ROWS, stride, cpu);
    const uint32_t splits[] = {0, 1, UINT32_MAX, 0}, chunks[] = {0, 1, 1, 3};
    const uint32_t counts[] = {1, 33, 1000, WIDE_ROWS};
    for (int m = 0; m < 4; m++) {
        isn_gpu_l2_options o;
        isn_gpu_l2_options_default(&o);
        o.split_below_rows = splits[m];
        o.overlap_chunks = chunks[m];
        isn_gpu_l2 *g = isn_gpu_l2_open(&o, err, sizeof err);
        if (!g) fail_msg("%s", err);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            isn_gpu_l2_stats st;
            memset(dev, 0, sizeof(float) * WIDE_ROWS);
            if (isn_gpu_l2_score_forest(g, f, x, counts[c], stride, dev, &st, err, sizeof err) != 0)
                fail_msg("%s, %u rows: %s", what, counts[c], err);
            snprintf(label, sizeof label, "%s, %u rows (split %s, %u chunks): %u tree groups", what, counts[c],
                     splits[m] == 1 ? "never" : splits[m] ? "always" : "auto", chunks[m] ? chunks[m] : 1, st.tree_splits);
            expect_equal(label, cpu, dev, counts[c]);
            printf("# %s: equal\n", label);
        }
        isn_gpu_l2_close(g);
    }
    free(cpu);
    free(dev);
    free(x);
    isn_forest_free(f);
}

/* The medium and large tree shapes, and rows wider than 32 of them fit a block (2,048 inputs,
 * 16 rows a block on an H200). */
static void test_wide_models(void **state) {
    (void)state;
    expect_wide_forest_equal(500, 500, 6);
    expect_wide_forest_equal(1250, 1250, 6);
    expect_wide_forest_equal(2048, 300, 6);
}

/* Trees of 512 and 1,024 leaves: leaf indices wider than a byte, through the split trees of both
 * kernels (narrow rows with splitting forced, and wide rows). */
static void test_deep_models(void **state) {
    (void)state;
    if (!gpu) skip();
    char path[128];
    snprintf(path, sizeof path, "%s/deep10.json", dir);
    write_random_xgboost(path, rows, ROWS, FEATURES, FEATURES, 40, 10);
    isn_forest *f = load_forest(path, true);
    expect_forest_equal("40 trees of depth 10", f);
    isn_forest_free(f);
    expect_wide_forest_equal(500, 120, 9);
}

/* Budget for two of three equal models: the third evicts the least recently used; a model above the
 * budget and one without a GPU form are refused (the caller scores on the CPU). */
static void test_model_cache(void **state) {
    (void)state;
    if (!gpu) skip();
    char path[3][128], err[ISN_ERR_LEN];
    isn_forest *f[3];
    for (int i = 0; i < 3; i++) {
        snprintf(path[i], sizeof path[i], "%s/cache_%d.json", dir, i);
        write_xgboost(path[i], 300, 6);
        f[i] = load_forest(path[i], true);
    }
    const uint64_t model_bytes = 300ull * (63 * 8 + 64 * 4);
    isn_gpu_l2_options o;
    isn_gpu_l2_options_default(&o);
    o.model_memory_budget = 2 * model_bytes + model_bytes / 2;
    isn_gpu_l2 *small = isn_gpu_l2_open(&o, err, sizeof err);
    if (!small) fail_msg("%s", err);
    float cpu[64], dev[64];
    isn_gpu_l2_stats st;
    const int order[] = {0, 1, 0, 2, 1, 0};
    /* 0, 1 loaded; 0 hit; 2 evicts 1 (least recently used); 1 evicts 0; 0 evicts 2. */
    const bool hit[] = {false, false, true, false, false, false};
    for (int k = 0; k < 6; k++) {
        int i = order[k];
        if (isn_gpu_l2_score_forest(small, f[i], rows, 64, FEATURES, dev, &st, err, sizeof err) != 0) fail_msg("%s", err);
        isn_forest_predict(f[i], rows, 64, FEATURES, cpu);
        expect_equal("cached model", cpu, dev, 64);
        if (st.cache_hit != hit[k]) fail_msg("call %d (model %d): cache_hit %d", k, i, st.cache_hit);
    }
    isn_gpu_l2_cache_info info;
    isn_gpu_l2_cache_get(small, &info);
    assert_int_equal(info.resident_models, 2);
    assert_true(info.resident_bytes <= o.model_memory_budget);
    assert_int_equal(info.evictions, 3);
    isn_gpu_l2_close(small);

    o.model_memory_budget = model_bytes / 2;
    small = isn_gpu_l2_open(&o, err, sizeof err);
    assert_non_null(small);
    assert_int_equal(isn_gpu_l2_score_forest(small, f[0], rows, 64, FEATURES, dev, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "above the GPU model budget"));
    isn_gpu_l2_close(small);
    for (int i = 0; i < 3; i++) isn_forest_free(f[i]);

    /* tiny_lgb.txt has zero-as-missing splits: no GPU form. */
    isn_forest *zero = load_forest("tests/data/l2/tiny_lgb.txt", false);
    assert_int_equal(isn_gpu_l2_score_forest(gpu, zero, rows, 4, 2, dev, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no GPU form"));
    isn_forest_free(zero);
}

static int setup(void **state) {
    (void)state;
    rows = malloc(sizeof(float) * ROWS * FEATURES);
    for (uint32_t i = 0; i < ROWS * FEATURES; i++) {
        uint32_t c = i % FEATURES;
        rows[i] = c < 3 ? (float)rnd(6) : gauss();
        if (rnd(20) == 0) rows[i] = NAN;
    }
    /* A fifth of the rows carry other rows' values, so that thresholds (taken from rows) are hit exactly. */
    for (uint32_t r = 0; r < ROWS; r += 5) rows[r * FEATURES + rnd(FEATURES)] = rows[rnd(1000) * FEATURES + rnd(FEATURES)];
    snprintf(dir, sizeof dir, "/tmp/isn-test-gpu-l2-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    isn_gpu_l2_options o;
    isn_gpu_l2_options_default(&o);
    gpu = isn_gpu_l2_open(&o, no_gpu_reason, sizeof no_gpu_reason);
    if (!gpu) printf("# SKIP: every GPU second-stage test: %s\n", no_gpu_reason);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    isn_gpu_l2_close(gpu);
    free(rows);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xgboost_models),
        cmocka_unit_test(test_lightgbm_model),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_wide_models),
        cmocka_unit_test(test_deep_models),
        cmocka_unit_test(test_model_cache),
    };
    return cmocka_run_group_tests_name("gpu_l2", tests, setup, teardown);
}
