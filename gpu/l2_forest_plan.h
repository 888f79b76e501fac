/* Private to gpu/: how a tree ensemble is launched on the GPU (l2_kernels.cu runs the plan). Plain C
 * with no CUDA in it, so that the choice is tested on machines without a GPU (test_gpu_forest_plan).
 *
 * Two kernels. ROW_THREADS: one thread a row, R rows a block (up to 256) staged in a fixed 32 KiB of
 * shared memory, so models of at most 256 inputs; each thread walks every tree of its group and sums
 * the leaves itself when there is one group. TREE_WARPS, for wider rows: a block of 32 rows (16 or 8
 * when even 32 do not fit) in up to the device's opt-in shared memory a block, and 16 warps that split
 * the block's trees between them, each walking its trees for the same rows; leaf indices go to a
 * scratch and a second kernel adds them per row in tree order, as the CPU does. */
#ifndef ISN_GPU_L2_FOREST_PLAN_H
#define ISN_GPU_L2_FOREST_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { L2_SPLIT_AUTO, L2_SPLIT_NEVER, L2_SPLIT_ALWAYS } l2_split_mode;

typedef enum { L2_FOREST_ROW_THREADS, L2_FOREST_TREE_WARPS } l2_forest_kind;

/* The ROW_THREADS kernel's rows of a block take at most this much shared memory. */
#define L2_ROW_THREADS_X_BYTES (32u * 1024u)
/* Splits (and, when the kernel sums, leaves) of the trees a ROW_THREADS block stages at once. */
#define L2_TREE_CHUNK_BYTES (16u * 1024u)
/* TREE_WARPS: warps a block, and the bounds of its tree chunk (the smallest also holds the warps'
 * transposition tiles while the rows are staged). */
#define L2_TREE_WARPS_WARPS 16u
#define L2_TREE_WARPS_MIN_CHUNK_BYTES (16u * 1024u)
#define L2_TREE_WARPS_MAX_CHUNK_BYTES (64u * 1024u)
/* Features a TREE_WARPS warp moves through its tile at a time (one 32-byte sector of a row). */
#define L2_STAGE_STRIP 8u
/* Deepest trees the kernels take (ranking's padded layout stops there too). */
#define L2_MAX_DEPTH 10u

/* What the plan depends on in the device. */
typedef struct {
    int multiprocessors;
    size_t smem_per_block_optin;    /* cudaDevAttrMaxSharedMemoryPerBlockOptin (227 KiB on an H200) */
    size_t smem_per_multiprocessor; /* cudaDevAttrMaxSharedMemoryPerMultiprocessor */
    size_t smem_reserved_per_block; /* cudaDevAttrReservedSharedMemoryPerBlock */
    uint32_t max_threads_per_multiprocessor;
} l2_device_limits;

typedef struct {
    uint32_t num_trees, depth, num_inputs;
    bool sum_in_double;
} l2_forest_shape;

typedef struct {
    l2_forest_kind kind;
    uint32_t rows_per_block, threads, groups, row_blocks;
    uint32_t trees_per_group, chunk_trees; /* chunk: trees staged in shared memory at once */
    uint32_t index_bytes;                  /* a leaf index in the scratch: 1, or 2 for trees deeper than 8 */
    uint32_t slice_rows;                   /* TREE_WARPS: rows a launch pair takes, so the scratch fits */
    size_t smem_bytes, scratch_bytes;
    size_t smem_optin; /* the device's opt-in a block, which kernels above 48 KiB are allowed */
} l2_forest_plan;

/* Blocks of the plan's kernel that fit on a multiprocessor with `threads` threads and `smem` bytes of
 * dynamic shared memory (on a device: the CUDA occupancy calculator, which also counts registers). */
typedef int (*l2_occupancy_fn)(void *ctx, l2_forest_kind kind, const l2_forest_shape *shape, uint32_t threads,
                               size_t smem);

typedef struct {
    l2_split_mode mode;
    size_t max_scratch;            /* bytes of leaf indices a launch may write */
    uint32_t tree_warps_above_inputs; /* models of more inputs take TREE_WARPS (at most 256: ROW_THREADS stops there) */
    l2_occupancy_fn occupancy;     /* NULL: from shared memory and threads alone */
    void *occupancy_ctx;
} l2_plan_options;

/* The widest rows a model can have on this device (TREE_WARPS with 8 rows a block). */
uint32_t l2_forest_max_inputs(const l2_device_limits *device);

/* The plan for n rows (n > 0). 0, or -1 with err naming what does not fit (a model deeper than the
 * kernels take, or of more inputs than the device's shared memory holds). */
int l2_forest_plan_make(const l2_forest_shape *shape, uint32_t n, const l2_device_limits *device,
                        const l2_plan_options *options, l2_forest_plan *plan, char *err, size_t err_len);

/* Shared memory a TREE_WARPS block of R rows takes: the rows transposed, then the larger of the tree
 * chunk and the warps' staging tiles (the same bytes, used one after the other). */
size_t l2_tree_warps_smem(uint32_t num_inputs, uint32_t rows_per_block, uint32_t threads, size_t chunk_bytes);

#ifdef __cplusplus
}
#endif

#endif
