/* The GPU tree ensembles' launch plan (gpu/l2_forest_plan.c), plain C, checked without a GPU against an
 * H200's limits: the issue's small ranker keeps the one-thread-a-row kernel; models of 500, 1,250 and
 * 2,048 inputs get the kernel whose warps split the trees, within the block's opt-in shared memory;
 * every plan covers every tree once, fits the device and the scratch bound; trees deeper than 8 levels
 * get two-byte leaf indices; a model wider than the device holds is refused with an error naming its
 * inputs and the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/l2_forest_plan.h"

static const l2_device_limits H200 = {
    .multiprocessors = 132,
    .smem_per_block_optin = 232448,
    .smem_per_multiprocessor = 233472,
    .smem_reserved_per_block = 1024,
    .max_threads_per_multiprocessor = 2048,
};

#define MAX_SCRATCH (256ull << 20)

static l2_plan_options options(l2_split_mode mode) {
    return (l2_plan_options){.mode = mode, .max_scratch = MAX_SCRATCH, .tree_warps_above_inputs = 256};
}

static void plan_ok(uint32_t inputs, uint32_t trees, uint32_t depth, uint32_t n, const l2_device_limits *d,
                    const l2_plan_options *o, l2_forest_plan *plan) {
    const l2_forest_shape shape = {trees, depth, inputs, false};
    char err[256] = "";
    if (l2_forest_plan_make(&shape, n, d, o, plan, err, sizeof err) != 0)
        fail_msg("%u inputs, %u trees of depth %u, %u rows: refused: %s", inputs, trees, depth, n, err);
}

/* What every plan must hold, whichever kernel it picks. */
static void expect_sound(uint32_t inputs, uint32_t trees, uint32_t depth, uint32_t n, const l2_device_limits *d,
                         const l2_plan_options *o, const l2_forest_plan *p) {
    char what[160];
    snprintf(what, sizeof what, "%u inputs, %u trees of depth %u, %u rows, mode %d", inputs, trees, depth, n, o->mode);
    const uint32_t rows = n ? n : 1;
    if (p->smem_bytes > d->smem_per_block_optin) fail_msg("%s: %zu bytes of shared memory a block", what, p->smem_bytes);
    if (p->groups < 1 || p->trees_per_group < 1 || (uint64_t)p->groups * p->trees_per_group < trees)
        fail_msg("%s: %u groups of %u trees leave trees out", what, p->groups, p->trees_per_group);
    if (p->chunk_trees < 1 || p->chunk_trees > p->trees_per_group) fail_msg("%s: chunk of %u trees", what, p->chunk_trees);
    if (p->index_bytes != (depth > 8 ? 2u : 1u)) fail_msg("%s: leaf indices of %u bytes", what, p->index_bytes);
    if (o->mode == L2_SPLIT_NEVER && p->groups != 1) fail_msg("%s: split never, %u groups", what, p->groups);
    if (o->mode == L2_SPLIT_ALWAYS && trees > 1 && p->groups < 2 && p->kind == L2_FOREST_TREE_WARPS)
        fail_msg("%s: split always, one group", what);
    if (p->kind == L2_FOREST_ROW_THREADS) {
        if (inputs > 256) fail_msg("%s: one thread a row for rows of more than 256 inputs", what);
        if ((size_t)inputs * p->rows_per_block * sizeof(float) > L2_ROW_THREADS_X_BYTES) fail_msg("%s: rows do not fit", what);
        if (p->threads != p->rows_per_block) fail_msg("%s: %u threads for %u rows", what, p->threads, p->rows_per_block);
        if (p->groups > 1 && p->scratch_bytes != (size_t)trees * rows * p->index_bytes) fail_msg("%s: scratch", what);
        if (p->groups == 1 && p->scratch_bytes != 0) fail_msg("%s: scratch without split trees", what);
        return;
    }
    const uint32_t R = p->rows_per_block;
    if (R != 32 && R != 16 && R != 8) fail_msg("%s: %u rows a block", what, R);
    if (p->threads % 32 || p->threads % R || p->threads > 1024) fail_msg("%s: %u threads", what, p->threads);
    if (p->groups > 1 && (uint64_t)(p->groups - 1) * p->trees_per_group >= trees) fail_msg("%s: an empty group", what);
    const size_t need = l2_tree_warps_smem(inputs, R, p->threads, (size_t)p->chunk_trees * (((size_t)1 << depth) - 1) * 8);
    if (p->smem_bytes != need) fail_msg("%s: %zu bytes of shared memory, the rows and trees take %zu", what, p->smem_bytes, need);
    if (p->slice_rows < 1 || p->slice_rows > rows) fail_msg("%s: slices of %u rows", what, p->slice_rows);
    if (p->slice_rows < rows && p->slice_rows % R) fail_msg("%s: slices of %u rows, blocks of %u", what, p->slice_rows, R);
    if (p->scratch_bytes != (size_t)p->slice_rows * trees * p->index_bytes) fail_msg("%s: scratch of %zu bytes", what, p->scratch_bytes);
    if (p->scratch_bytes > o->max_scratch && p->slice_rows > R) fail_msg("%s: scratch above the bound", what);
    if (p->row_blocks != (p->slice_rows + R - 1) / R) fail_msg("%s: %u row blocks", what, p->row_blocks);
}

/* The issue's shapes and the 2,048-input bound of the task: none refused on an H200. */
static void test_issue_shapes_have_a_plan(void **state) {
    (void)state;
    const l2_plan_options o = options(L2_SPLIT_AUTO);
    static const uint32_t ns[] = {1, 33, 1000, 10000};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        l2_forest_plan p;
        plan_ok(100, 100, 6, ns[i], &H200, &o, &p);
        expect_sound(100, 100, 6, ns[i], &H200, &o, &p);
        assert_int_equal(p.kind, L2_FOREST_ROW_THREADS); /* the small ranker keeps its kernel */
        assert_int_equal(p.rows_per_block, 64);

        plan_ok(500, 500, 6, ns[i], &H200, &o, &p);
        expect_sound(500, 500, 6, ns[i], &H200, &o, &p);
        assert_int_equal(p.kind, L2_FOREST_TREE_WARPS);
        assert_int_equal(p.rows_per_block, 32);
        assert_true(p.smem_bytes > 48 * 1024); /* opted in */

        plan_ok(1250, 1250, 6, ns[i], &H200, &o, &p);
        expect_sound(1250, 1250, 6, ns[i], &H200, &o, &p);
        assert_int_equal(p.kind, L2_FOREST_TREE_WARPS);
        assert_int_equal(p.rows_per_block, 32);
        if (ns[i] <= 1000) assert_true(p.groups > 1); /* few rows: the trees spread over the multiprocessors */
        if (ns[i] == 10000) assert_int_equal(p.slice_rows, 10000);

        plan_ok(2048, 2048, 6, ns[i], &H200, &o, &p);
        expect_sound(2048, 2048, 6, ns[i], &H200, &o, &p);
        assert_int_equal(p.kind, L2_FOREST_TREE_WARPS);
        assert_int_equal(p.rows_per_block, 16); /* 32 rows of 2,048 inputs are 256 KiB */
    }
}

static void test_many_shapes_are_sound(void **state) {
    (void)state;
    static const uint32_t inputs[] = {1, 12, 100, 128, 129, 256, 257, 500, 1024, 1250, 1672, 1673, 2048, 3000, 4096, 6752};
    static const uint32_t trees[] = {1, 2, 7, 100, 1250, 5000};
    static const uint32_t ns[] = {1, 31, 33, 1000, 10000, 262144};
    for (size_t a = 0; a < sizeof inputs / sizeof *inputs; a++)
        for (size_t b = 0; b < sizeof trees / sizeof *trees; b++)
            for (uint32_t depth = 1; depth <= L2_MAX_DEPTH; depth++)
                for (size_t c = 0; c < sizeof ns / sizeof *ns; c++)
                    for (int m = L2_SPLIT_AUTO; m <= L2_SPLIT_ALWAYS; m++)
                        for (uint32_t above = 0; above <= 256; above += 256) {
                            l2_plan_options o = options((l2_split_mode)m);
                            o.tree_warps_above_inputs = above;
                            l2_forest_plan p;
                            plan_ok(inputs[a], trees[b], depth, ns[c], &H200, &o, &p);
                            expect_sound(inputs[a], trees[b], depth, ns[c], &H200, &o, &p);
                            if (above == 0) assert_int_equal(p.kind, L2_FOREST_TREE_WARPS);
                        }
}

/* Deep trees' leaf indices take two bytes: the scratch is sized for them. */
static void test_deep_trees_index_in_two_bytes(void **state) {
    (void)state;
    const l2_plan_options o = options(L2_SPLIT_ALWAYS);
    l2_forest_plan p;
    plan_ok(12, 40, 10, 1000, &H200, &o, &p);
    assert_int_equal(p.kind, L2_FOREST_ROW_THREADS);
    assert_true(p.groups > 1);
    assert_int_equal(p.index_bytes, 2);
    assert_int_equal(p.scratch_bytes, 40u * 1000u * 2u);
    plan_ok(12, 40, 8, 1000, &H200, &o, &p);
    assert_int_equal(p.index_bytes, 1);
}

/* Rows whose leaf indices would pass the scratch bound go in slices of whole row blocks. */
static void test_scratch_bound_slices_the_rows(void **state) {
    (void)state;
    l2_plan_options o = options(L2_SPLIT_AUTO);
    o.max_scratch = 1u << 20;
    l2_forest_plan p;
    plan_ok(1250, 1250, 9, 10000, &H200, &o, &p);
    expect_sound(1250, 1250, 9, 10000, &H200, &o, &p);
    assert_int_equal(p.slice_rows, (1u << 20) / 2500 / 32 * 32);
    assert_true(p.scratch_bytes <= o.max_scratch);
}

static void expect_refused(uint32_t inputs, uint32_t depth, const l2_device_limits *d, const char *says) {
    const l2_forest_shape shape = {100, depth, inputs, false};
    const l2_plan_options o = options(L2_SPLIT_AUTO);
    l2_forest_plan p;
    char err[256] = "";
    assert_int_equal(l2_forest_plan_make(&shape, 1000, d, &o, &p, err, sizeof err), -1);
    if (!strstr(err, says)) fail_msg("%u inputs, depth %u: error '%s' does not say '%s'", inputs, depth, err, says);
}

static void test_too_wide_or_deep_is_refused(void **state) {
    (void)state;
    assert_int_equal(l2_forest_max_inputs(&H200), 6752);
    expect_refused(6753, 6, &H200, "model of 6753 inputs has no GPU form");
    expect_refused(6753, 6, &H200, "at most 6752 inputs");
    expect_refused(100, 11, &H200, "depth 11");
    /* a device of 48 KiB a block: 2,048 inputs do not fit, 1,024 do */
    l2_device_limits small = H200;
    small.smem_per_block_optin = 48 * 1024;
    small.smem_per_multiprocessor = 64 * 1024;
    expect_refused(2048, 6, &small, "model of 2048 inputs has no GPU form: this GPU's trees take at most 1024 inputs");
    l2_forest_plan p;
    const l2_plan_options o = options(L2_SPLIT_AUTO);
    plan_ok(1024, 300, 6, 500, &small, &o, &p);
    expect_sound(1024, 300, 6, 500, &small, &o, &p);
    assert_int_equal(p.rows_per_block, 8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_issue_shapes_have_a_plan),
        cmocka_unit_test(test_many_shapes_are_sound),
        cmocka_unit_test(test_deep_trees_index_in_two_bytes),
        cmocka_unit_test(test_scratch_bound_slices_the_rows),
        cmocka_unit_test(test_too_wide_or_deep_is_refused),
    };
    return cmocka_run_group_tests_name("gpu_forest_plan", tests, NULL, NULL);
}
