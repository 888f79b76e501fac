/* Private to gpu/: the second stage's kernels (l2_kernels.cu), launched by the model cache and the
 * scoring calls (ranker_model_cache.cu). CUDA C++ only. */
#ifndef ISN_GPU_L2_KERNELS_H
#define ISN_GPU_L2_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "gpu/gpu.h"
}
#include "gpu/l2_forest_plan.h"

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

/* The device's limits that a forest plan depends on (l2_forest_plan.h), read once per handle. */
cudaError_t l2_device_limits_get(int device, l2_device_limits *limits);

/* The plan for n rows of the model's num_inputs inputs (l2_forest_plan_make with the CUDA occupancy
 * calculator); AUTO splits the trees into groups when the row blocks alone would leave
 * multiprocessors idle. cudaErrorInvalidValue with err when the model has no GPU form. */
cudaError_t l2_plan_forest(const l2_device_forest *forest, uint32_t n, uint32_t num_inputs,
                           const l2_device_limits *device, const l2_plan_options *options, l2_forest_plan *plan,
                           char *err, size_t err_len);

/* Scores n rows (row-major, stride floats apart) into out. ROW_THREADS with one group: each thread
 * walks every tree of its row and sums as the CPU does. Otherwise the trees are split (into groups
 * over grid.y, and TREE_WARPS between the warps of a block), each walker writes its leaf per tree into
 * leaf_index ([tree][row], plan->index_bytes each, plan->scratch_bytes) and a second kernel sums them
 * in tree order; TREE_WARPS takes the rows plan->slice_rows at a time. */
cudaError_t l2_launch_forest(const l2_device_forest *forest, const l2_forest_plan *plan, const float *rows, uint32_t n,
                             uint32_t stride, uint32_t num_inputs, void *leaf_index, float *out, cudaStream_t stream);

/* One dense layer over n rows: y[r * out + o] = act(sum_i w[o * in + i] * x[r * x_stride + i] + b[o]),
 * summed in order without fused multiply-add, as the CPU does. x_last non-NULL: input in - 1 of row r is
 * x_last[r] (isn_mlp_predict_last: a stacked ranker's MLP reading the trees' scores). */
cudaError_t l2_launch_dense(const float *x, uint32_t x_stride, const float *x_last, uint32_t n, const float *w,
                            const float *b, uint32_t in, uint32_t out, bool relu, float *y, cudaStream_t stream);

/* The pass's feature and transform steps (l2_pass_kernels.cu); queries, row_start and views point into
 * the packed buffer on the device (l2_pass.h). */
/* Once per device before the first pass: room on each thread's stack for a feature row. */
cudaError_t l2_prepare_pass_kernels(void);
cudaError_t l2_launch_feature_rows(const isn_feature_hits *queries, const uint32_t *row_start, uint32_t num_queries,
                                   uint32_t num_rows, uint32_t num_features, float *features, cudaStream_t stream);
cudaError_t l2_launch_transforms(const isn_transform_view *views, uint32_t num_inputs, const float *features,
                                 uint32_t num_features, uint32_t num_rows, float *inputs, cudaStream_t stream);

#endif
