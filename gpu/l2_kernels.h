/* Private to gpu/: the second stage's kernels (l2_kernels.cu), launched by the model cache and the
 * scoring calls (ranker_model_cache.cu). CUDA C++ only. */
#ifndef ISN_GPU_L2_KERNELS_H
#define ISN_GPU_L2_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "gpu/gpu.h"
}

/* A split on the device: x < threshold (or NaN without the NaN-right bit) goes left. Padding splits
 * have a NaN threshold and go left. */
typedef struct {
    float threshold;
    uint32_t feature_nan_right; /* feature index | L2_NAN_RIGHT */
} l2_split;

#define L2_NAN_RIGHT 0x80000000u

typedef struct {
    const l2_split *splits; /* num_trees * (2^depth - 1), heap order per tree */
    const float *leaf_f;    /* num_trees * 2^depth (float sums) */
    const double *leaf_d;   /* the same (double sums); one of the two is set */
    uint32_t num_trees, depth;
    double base_score;
    bool average_output;
} l2_device_forest;

typedef enum { L2_SPLIT_AUTO, L2_SPLIT_NEVER, L2_SPLIT_ALWAYS } l2_split_mode;

/* How a call is launched: rows per block (their inputs staged in shared memory), tree groups over
 * grid.y, and the leaf-index scratch that groups > 1 needs. */
typedef struct {
    uint32_t rows_per_block, groups, row_blocks;
    size_t smem_bytes, scratch_bytes;
} l2_forest_plan;

/* Picks the plan for n rows of num_inputs inputs; AUTO splits the trees when the row blocks alone
 * would leave multiprocessors idle. cudaErrorInvalidValue when the inputs do not fit shared memory. */
cudaError_t l2_plan_forest(const l2_device_forest *forest, uint32_t n, uint32_t num_inputs, l2_split_mode mode,
                           int multiprocessors, size_t max_scratch, l2_forest_plan *plan);

/* Scores n rows (row-major, stride floats apart) into out: with one group each thread walks every
 * tree of its row and sums as the CPU does; with more the trees are split into groups over grid.y,
 * each thread writes its leaf per tree into leaf_index ([tree][row], uint8, plan->scratch_bytes) and
 * a second kernel sums them in tree order. */
cudaError_t l2_launch_forest(const l2_device_forest *forest, const l2_forest_plan *plan, const float *rows, uint32_t n,
                             uint32_t stride, uint32_t num_inputs, uint8_t *leaf_index, float *out, cudaStream_t stream);

/* One dense layer over n rows: y[r * out + o] = act(sum_i w[o * in + i] * x[r * x_stride + i] + b[o]),
 * summed in order without fused multiply-add, as the CPU does. */
cudaError_t l2_launch_dense(const float *x, uint32_t x_stride, uint32_t n, const float *w, const float *b, uint32_t in,
                            uint32_t out, bool relu, float *y, cudaStream_t stream);

/* The pass's feature and transform steps (l2_pass_kernels.cu); queries, row_start and views point into
 * the packed buffer on the device (l2_pass.h). */
/* Once per device before the first pass: room on each thread's stack for a feature row. */
cudaError_t l2_prepare_pass_kernels(void);
cudaError_t l2_launch_feature_rows(const isn_feature_hits *queries, const uint32_t *row_start, uint32_t num_queries,
                                   uint32_t num_rows, uint32_t num_features, float *features, cudaStream_t stream);
cudaError_t l2_launch_transforms(const isn_transform_view *views, uint32_t num_inputs, const float *features,
                                 uint32_t num_features, uint32_t num_rows, float *inputs, cudaStream_t stream);

#endif
