// The first two steps of the second-stage pass on the device (gpu.h isn_gpu_l2_pass): a thread per
// candidate computes its feature row from the packed hits with the CPU's own isn_feature_row, then a
// thread per (candidate, model input) its transform with isn_transform_apply. Built with -fmad=false
// (gpu/module.mk): a fused multiply-add would round differently from the CPU.
#include <cuda_runtime.h>

extern "C" {
#include "gpu/l2_pass.h"
}
#include "gpu/l2_kernels.h"

#define PASS_THREADS 128

__global__ void feature_rows_kernel(const isn_feature_hits *queries, const uint32_t *row_start, uint32_t num_queries,
                                    uint32_t num_rows, uint32_t num_features, float *features) {
    const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= num_rows) return;
    const uint32_t q = l2_pass_query_of(row_start, num_queries, r);
    isn_feature_row(&queries[q], r - row_start[q], features + (size_t)r * num_features);
}

__global__ void transforms_kernel(const isn_transform_view *views, uint32_t num_inputs, const float *features,
                                  uint32_t num_features, uint32_t num_rows, float *inputs) {
    const uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (uint64_t)num_rows * num_inputs) return;
    const uint32_t r = (uint32_t)(k / num_inputs), j = (uint32_t)(k % num_inputs);
    inputs[k] = isn_transform_apply(&views[j], features + (size_t)r * num_features);
}

cudaError_t l2_prepare_pass_kernels(void) {
    /* A feature row's proximity keeps two runs of ISN_L2_POS_CAP positions per thread (about 2 KiB of
     * stack, ptxas -v): above the default per-thread stack limit of 1 KiB, so raise it when needed. */
    cudaFuncAttributes attributes;
    cudaError_t e = cudaFuncGetAttributes(&attributes, feature_rows_kernel);
    size_t limit = 0;
    if (e == cudaSuccess) e = cudaDeviceGetLimit(&limit, cudaLimitStackSize);
    if (e == cudaSuccess && limit < attributes.localSizeBytes + 1024)
        e = cudaDeviceSetLimit(cudaLimitStackSize, attributes.localSizeBytes + 1024);
    return e;
}

cudaError_t l2_launch_feature_rows(const isn_feature_hits *queries, const uint32_t *row_start, uint32_t num_queries,
                                   uint32_t num_rows, uint32_t num_features, float *features, cudaStream_t stream) {
    if (num_rows == 0) return cudaSuccess;
    feature_rows_kernel<<<(num_rows + PASS_THREADS - 1) / PASS_THREADS, PASS_THREADS, 0, stream>>>(
        queries, row_start, num_queries, num_rows, num_features, features);
    return cudaGetLastError();
}

cudaError_t l2_launch_transforms(const isn_transform_view *views, uint32_t num_inputs, const float *features,
                                 uint32_t num_features, uint32_t num_rows, float *inputs, cudaStream_t stream) {
    const uint64_t total = (uint64_t)num_rows * num_inputs;
    if (total == 0) return cudaSuccess;
    transforms_kernel<<<(unsigned)((total + PASS_THREADS - 1) / PASS_THREADS), PASS_THREADS, 0, stream>>>(
        views, num_inputs, features, num_features, num_rows, inputs);
    return cudaGetLastError();
}
