/* The launch plan of a tree ensemble (l2_forest_plan.h): which kernel, rows and threads a block, tree
 * groups over the grid, shared memory and leaf-index scratch. */
#include <stdio.h>
#include <string.h>

#include "gpu/l2_forest_plan.h"

static size_t align16(size_t b) { return (b + 15) & ~(size_t)15; }

static size_t split_bytes_per_tree(const l2_forest_shape *s) { return (((size_t)1 << s->depth) - 1) * 8; }

static size_t leaf_bytes_per_tree(const l2_forest_shape *s) {
    return ((size_t)1 << s->depth) * (s->sum_in_double ? sizeof(double) : sizeof(float));
}

/* ------------------------------------------------------------------ ROW_THREADS */

static uint32_t row_threads_chunk(const l2_forest_shape *s, bool summing) {
    const size_t per_tree = align16(split_bytes_per_tree(s)) + (summing ? leaf_bytes_per_tree(s) : 0);
    const uint32_t c = (uint32_t)(L2_TREE_CHUNK_BYTES / per_tree);
    return c ? c : 1;
}

static size_t row_threads_smem(const l2_forest_shape *s, uint32_t rows_per_block, uint32_t chunk, bool summing) {
    return align16((size_t)s->num_inputs * rows_per_block * sizeof(float)) + align16(chunk * split_bytes_per_tree(s)) +
           (summing ? chunk * leaf_bytes_per_tree(s) : 0);
}

static int blocks_per_multiprocessor(const l2_plan_options *o, const l2_device_limits *d, l2_forest_kind kind,
                                     const l2_forest_shape *s, uint32_t threads, size_t smem) {
    int per_sm;
    if (o->occupancy) {
        per_sm = o->occupancy(o->occupancy_ctx, kind, s, threads, smem);
    } else {
        const size_t by_smem = d->smem_per_multiprocessor / (smem + d->smem_reserved_per_block);
        const size_t by_threads = d->max_threads_per_multiprocessor / threads;
        per_sm = (int)(by_smem < by_threads ? by_smem : by_threads);
    }
    return per_sm < 1 ? 1 : per_sm;
}

/* The rows of a block fit a fixed 32 KiB: at most 256 inputs. */
static bool row_threads_plan(const l2_forest_shape *s, uint32_t n, const l2_device_limits *d, const l2_plan_options *o,
                             l2_forest_plan *plan) {
    uint32_t R = 256;
    while (R > 32 && (size_t)s->num_inputs * R * sizeof(float) > L2_ROW_THREADS_X_BYTES) R /= 2;
    if ((size_t)s->num_inputs * R * sizeof(float) > L2_ROW_THREADS_X_BYTES) return false;
    plan->kind = L2_FOREST_ROW_THREADS;
    plan->rows_per_block = plan->threads = R;
    plan->row_blocks = (n + R - 1) / R;
    plan->groups = 1;
    plan->slice_rows = n;
    if (o->mode != L2_SPLIT_NEVER && s->num_trees > 1) {
        const size_t one_pass = row_threads_smem(s, R, row_threads_chunk(s, true), true);
        const int per_sm = blocks_per_multiprocessor(o, d, L2_FOREST_ROW_THREADS, s, R, one_pass);
        const uint32_t target = (uint32_t)(per_sm * d->multiprocessors);
        uint32_t groups = plan->row_blocks < target ? (target + plan->row_blocks - 1) / plan->row_blocks : 1;
        if (o->mode == L2_SPLIT_ALWAYS && groups < 2) groups = 2;
        const uint32_t most = (s->num_trees + 7) / 8; /* at least 8 trees a group */
        if (groups > most) groups = most > 1 ? most : 2;
        if (groups > s->num_trees) groups = s->num_trees;
        if (groups > 1 && (size_t)s->num_trees * n * plan->index_bytes <= o->max_scratch) plan->groups = groups;
    }
    const bool summing = plan->groups == 1;
    plan->trees_per_group = (s->num_trees + plan->groups - 1) / plan->groups;
    const uint32_t chunk = row_threads_chunk(s, summing);
    plan->chunk_trees = chunk < plan->trees_per_group ? chunk : plan->trees_per_group;
    plan->smem_bytes = row_threads_smem(s, R, chunk, summing);
    plan->scratch_bytes = summing ? 0 : (size_t)s->num_trees * n * plan->index_bytes;
    return true;
}

/* ------------------------------------------------------------------ TREE_WARPS */

size_t l2_tree_warps_smem(uint32_t num_inputs, uint32_t rows_per_block, uint32_t threads, size_t chunk_bytes) {
    const size_t tiles = (size_t)(threads / 32) * rows_per_block * (L2_STAGE_STRIP + 1) * sizeof(float);
    const size_t area = align16(chunk_bytes) > tiles ? align16(chunk_bytes) : align16(tiles);
    return align16((size_t)num_inputs * rows_per_block * sizeof(float)) + area;
}

/* Rows per block: 32 when they fit (a warp's 32 reads of a tree's feature then fall in 32 banks), else
 * 16 or 8 (two or four trees a warp, reads at most two- or four-way conflicted). 0 when none fits. */
static uint32_t tree_warps_rows(uint32_t num_inputs, uint32_t threads, const l2_device_limits *d) {
    for (uint32_t R = 32; R >= 8; R /= 2)
        if (l2_tree_warps_smem(num_inputs, R, threads, L2_TREE_WARPS_MIN_CHUNK_BYTES) <= d->smem_per_block_optin) return R;
    return 0;
}

uint32_t l2_forest_max_inputs(const l2_device_limits *d) {
    const uint32_t threads = L2_TREE_WARPS_WARPS * 32;
    const size_t fixed = l2_tree_warps_smem(0, 8, threads, L2_TREE_WARPS_MIN_CHUNK_BYTES);
    if (d->smem_per_block_optin < fixed) return 0;
    uint32_t most = (uint32_t)((d->smem_per_block_optin - fixed) / (8 * sizeof(float)));
    while (most > 0 && l2_tree_warps_smem(most, 8, threads, L2_TREE_WARPS_MIN_CHUNK_BYTES) > d->smem_per_block_optin) most--;
    const uint32_t row_threads_most = L2_ROW_THREADS_X_BYTES / (32 * sizeof(float)); /* 32 rows in 32 KiB */
    return most > row_threads_most ? most : row_threads_most;
}

static bool tree_warps_plan(const l2_forest_shape *s, uint32_t n, const l2_device_limits *d, const l2_plan_options *o,
                            l2_forest_plan *plan) {
    const uint32_t threads = L2_TREE_WARPS_WARPS * 32;
    const uint32_t R = tree_warps_rows(s->num_inputs, threads, d);
    if (R == 0) return false;
    plan->kind = L2_FOREST_TREE_WARPS;
    plan->rows_per_block = R;
    plan->threads = threads;
    /* The chunk grows into the shared memory a block has anyway at the residency its rows allow (fewer
     * passes over the chunk's barrier), up to a bound; but it holds a tree for every lane even where
     * that costs residency (deep trees): a lane without a tree is a warp idle in every chunk. */
    const size_t xs = align16((size_t)s->num_inputs * R * sizeof(float));
    const size_t least = l2_tree_warps_smem(s->num_inputs, R, threads, L2_TREE_WARPS_MIN_CHUNK_BYTES);
    size_t resident = d->smem_per_multiprocessor / (least + d->smem_reserved_per_block);
    if (resident > d->max_threads_per_multiprocessor / threads) resident = d->max_threads_per_multiprocessor / threads;
    if (resident < 1) resident = 1;
    size_t chunk_bytes = d->smem_per_multiprocessor / resident - d->smem_reserved_per_block - xs;
    if (chunk_bytes > L2_TREE_WARPS_MAX_CHUNK_BYTES) chunk_bytes = L2_TREE_WARPS_MAX_CHUNK_BYTES;
    const size_t every_lane = (size_t)(threads / R) * split_bytes_per_tree(s);
    if (chunk_bytes < every_lane) chunk_bytes = every_lane;
    if (chunk_bytes > d->smem_per_block_optin - xs) chunk_bytes = d->smem_per_block_optin - xs;
    if (chunk_bytes < L2_TREE_WARPS_MIN_CHUNK_BYTES) chunk_bytes = L2_TREE_WARPS_MIN_CHUNK_BYTES;
    uint32_t chunk = (uint32_t)(chunk_bytes / split_bytes_per_tree(s));
    if (chunk < 1) chunk = 1;
    /* Rows a launch takes: all of them unless their leaf indices would pass the scratch bound. */
    const size_t per_row = (size_t)s->num_trees * plan->index_bytes;
    size_t slice = o->max_scratch / per_row / R * R;
    if (slice < R) slice = R;
    plan->slice_rows = slice < n ? (uint32_t)slice : n;
    plan->row_blocks = (plan->slice_rows + R - 1) / R;
    uint32_t groups = 1;
    if (o->mode != L2_SPLIT_NEVER && s->num_trees > 1) {
        const size_t smem = l2_tree_warps_smem(s->num_inputs, R, threads, (size_t)chunk * split_bytes_per_tree(s));
        const int per_sm = blocks_per_multiprocessor(o, d, L2_FOREST_TREE_WARPS, s, threads, smem);
        const uint32_t target = (uint32_t)(per_sm * d->multiprocessors);
        groups = plan->row_blocks < target ? (target + plan->row_blocks - 1) / plan->row_blocks : 1;
        /* every tree lane of a block has a tree: a group of fewer trees leaves warps idle */
        const uint32_t lanes = threads / R, most = (s->num_trees + lanes - 1) / lanes;
        if (groups > most) groups = most;
        if (o->mode == L2_SPLIT_ALWAYS && groups < 2) groups = 2;
        if (groups > s->num_trees) groups = s->num_trees;
    }
    plan->trees_per_group = (s->num_trees + groups - 1) / groups;
    plan->groups = (s->num_trees + plan->trees_per_group - 1) / plan->trees_per_group; /* none empty */
    plan->chunk_trees = chunk < plan->trees_per_group ? chunk : plan->trees_per_group;
    plan->smem_bytes = l2_tree_warps_smem(s->num_inputs, R, threads, (size_t)plan->chunk_trees * split_bytes_per_tree(s));
    plan->scratch_bytes = (size_t)plan->slice_rows * per_row;
    return true;
}

int l2_forest_plan_make(const l2_forest_shape *s, uint32_t n, const l2_device_limits *d, const l2_plan_options *o,
                        l2_forest_plan *plan, char *err, size_t err_len) {
    memset(plan, 0, sizeof *plan);
    if (s->depth < 1 || s->depth > L2_MAX_DEPTH) {
        snprintf(err, err_len, "trees of depth %u have no GPU form (the kernels take 1 to %u levels)", s->depth,
                 L2_MAX_DEPTH);
        return -1;
    }
    if (s->num_trees == 0) {
        snprintf(err, err_len, "a model of no trees has no GPU form");
        return -1;
    }
    plan->index_bytes = s->depth <= 8 ? 1 : 2;
    if (n == 0) n = 1;
    plan->smem_optin = d->smem_per_block_optin;
    if (s->num_inputs <= o->tree_warps_above_inputs && row_threads_plan(s, n, d, o, plan)) return 0;
    if (tree_warps_plan(s, n, d, o, plan)) return 0;
    snprintf(err, err_len,
             "model of %u inputs has no GPU form: this GPU's trees take at most %u inputs (8 rows of them a block "
             "in %zu bytes of shared memory)",
             s->num_inputs, l2_forest_max_inputs(d), d->smem_per_block_optin);
    memset(plan, 0, sizeof *plan);
    return -1;
}
